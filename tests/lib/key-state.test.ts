// A stored key's state (lib/keys.ts): the one expiry rule the auth chain and
// `sluice keys list` share — expired from its `expires_at` instant on, revoked before expired.

import t from 'tap';
import { isExpired, keyState } from '../../lib/keys.ts';

const AT = Date.parse('2025-03-10T00:00:00.000Z');

t.test('isExpired: from the expires_at instant on', async (t) => {
  t.equal(isExpired({ expires_at: null }, AT), false, 'no expiry');
  t.equal(isExpired({ expires_at: '' }, AT), false, 'an empty expiry is none');
  t.equal(isExpired({ expires_at: '2025-03-10T00:00:00.000Z' }, AT - 1), false, 'a millisecond before');
  t.equal(isExpired({ expires_at: '2025-03-10T00:00:00.000Z' }, AT), true, 'at the instant');
  t.equal(isExpired({ expires_at: '2025-03-10T00:00:00.000Z' }, AT + 86_400_000), true, 'after');
});

t.test('keyState: revoked wins, then expired, else active', async (t) => {
  t.equal(keyState({ revoked_at: null, expires_at: null }, AT), 'active');
  t.equal(keyState({ revoked_at: null, expires_at: '2025-03-11T00:00:00.000Z' }, AT), 'active');
  t.equal(keyState({ revoked_at: null, expires_at: '2025-03-10T00:00:00.000Z' }, AT), 'expired');
  t.equal(keyState({ revoked_at: '2025-03-01T00:00:00.000Z', expires_at: '2025-03-10T00:00:00.000Z' }, AT), 'revoked');
});
