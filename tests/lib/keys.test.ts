// The client key format (docs/operation.md, "Client keys"): generated keys match the contract's regex with a
// 32-character base62 token and never repeat; parseKey refuses every other shape; the display
// prefix shows only the last four token characters; hashKey is the lower-case hex sha256.

import { createHash } from 'node:crypto';
import t from 'tap';
import { displayPrefix, generateKey, hashKey, KEY_RE, parseKey } from '../../lib/keys.ts';

// Written out from docs/operation.md, not imported, so a drift in lib/keys.ts shows here.
const CONTRACT_KEY_RE = /^sluice_([a-z][a-z0-9-]{0,31})_([A-Za-z0-9]{32})$/;
const TOKEN = 'Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4F';

t.test('generateKey', async (t) => {
  const seen = new Set<string>();
  const counts = new Map<string, number>();
  for (let i = 0; i < 2000; i++) {
    const key = generateKey('dev');
    const m = CONTRACT_KEY_RE.exec(key);
    if (!m) t.fail(`bad shape: ${key.slice(0, 12)}…`);
    if (m![1] !== 'dev' || m![2]!.length !== 32) t.fail('profile or token length wrong');
    seen.add(key);
    for (const ch of m![2]!) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  }
  t.equal(seen.size, 2000, '2000 keys, all distinct');
  t.equal(counts.size, 62, 'every base62 character turns up');
  // 64000 characters over 62 symbols: about 1032 each; a biased or truncated alphabet falls far outside.
  t.ok(Math.min(...counts.values()) > 850 && Math.max(...counts.values()) < 1250, 'characters are spread evenly');
  const long = 'a'.repeat(32);
  t.match(generateKey(long), CONTRACT_KEY_RE, 'a 32-character profile name');
  t.match(generateKey('my-profile-2'), CONTRACT_KEY_RE);
  t.equal(parseKey(generateKey('car'))?.profile, 'car');
  t.equal(KEY_RE.source, CONTRACT_KEY_RE.source, 'the module uses the contract regex');
});

t.test('parseKey', async (t) => {
  t.strictSame(parseKey(`sluice_dev_${TOKEN}`), { profile: 'dev', token: TOKEN });
  t.strictSame(parseKey(`sluice_my-profile_${TOKEN}`), { profile: 'my-profile', token: TOKEN });
  const bad = [
    '', 'sluice', `sluice_${TOKEN}`, `sluice__${TOKEN}`, `sluice_dev_${TOKEN.slice(1)}`, `sluice_dev_${TOKEN}x`,
    `sluice_my_profile_${TOKEN}`, `sluice_Dev_${TOKEN}`, `sluice_1dev_${TOKEN}`, `sluice_-dev_${TOKEN}`,
    `sluice_${'a'.repeat(33)}_${TOKEN}`, `gw_dev_${TOKEN}`, `Sluice_dev_${TOKEN}`, ` sluice_dev_${TOKEN}`,
    `sluice_dev_${TOKEN} `, `sluice_dev_${TOKEN}\n`, `sluice_dev_${TOKEN.slice(0, 31)}-`, `sluice_dev_${TOKEN.slice(0, 31)}_`,
    `sluice_dev_${TOKEN.slice(0, 31)}é`, `sluice_dev_${TOKEN.slice(0, 31)}=`, `sluice_dév_${TOKEN}`, `Bearer sluice_dev_${TOKEN}`,
  ];
  for (const k of bad) t.equal(parseKey(k), undefined, `refuses ${JSON.stringify(k.length > 24 ? `${k.slice(0, 24)}…(${k.length})` : k)}`);
  t.ok(parseKey(`sluice_${'a'.repeat(32)}_${TOKEN}`), 'a 32-character profile is fine');
});

t.test('displayPrefix', async (t) => {
  t.equal(displayPrefix('dev', TOKEN), 'sluice_dev_…Cd4F');
  const key = generateKey('assistant');
  const { profile, token } = parseKey(key)!;
  const prefix = displayPrefix(profile, token);
  t.equal(prefix, `sluice_assistant_…${key.slice(-4)}`);
  t.notOk(prefix.includes(token.slice(0, 28)), 'the rest of the token is not shown');
});

t.test('hashKey', async (t) => {
  const key = `sluice_dev_${TOKEN}`;
  const h = hashKey(key);
  t.match(h, /^[0-9a-f]{64}$/);
  t.equal(h, createHash('sha256').update(key, 'utf8').digest('hex'));
  t.equal(hashKey('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'the sha256 test vector');
  t.not(hashKey(key), hashKey(`${key.slice(0, -1)}G`));
});
