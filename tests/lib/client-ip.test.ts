// Client addresses: IP/CIDR lists compiled for v4 and v6 (bad entries refused; mapped and NAT64
// entries matching IPv4), one canonical spelling per address (mapped dotted and hex, NAT64, IPv6
// case and compression, zone ids), X-Forwarded-For entries with ports, which entry to believe
// behind trusted proxies (never from an untrusted peer; unreadable ones from a trusted peer give
// null, a refusal), and the IP-block bucket (IPv4 whole, IPv6 per /64, whatever spelling the same
// address or /64 arrives in).

import t from 'tap';
import { canonicalIp, clientIp, compileIpList, forwardedAddress, inList, ipBlockBucket } from '../../lib/client-ip.ts';

t.test('compileIpList', async (t) => {
  const list = compileIpList(['192.168.1.0/24', ' 10.1.2.3 ', '', '  ', '2001:db8::/32', '::1', 'fe80::1:0/112', '172.16.0.9/12']);
  const cases: Array<[string, boolean]> = [
    ['192.168.1.0', true], ['192.168.1.255', true], ['192.168.2.0', false], ['192.168.0.255', false],
    ['10.1.2.3', true], ['10.1.2.4', false],
    ['2001:db8::1', true], ['2001:db8:ffff:ffff::', true], ['2001:0DB8:0:0:0:0:0:7', true], ['2001:db9::', false],
    ['::1', true], ['::2', false], ['0:0:0:0:0:0:0:1', true],
    ['fe80::1:ffff', true], ['fe80::2:0', false],
    ['172.31.255.255', true], ['172.32.0.0', false], ['172.16.0.0', true],
    ['not-an-ip', false], ['', false],
  ];
  for (const [ip, want] of cases) t.equal(inList(list, ip), want, `${ip} ${want ? 'in' : 'not in'} the list`);
  t.ok(inList(compileIpList(['0.0.0.0/0']), '203.0.113.1'), '/0 holds every IPv4 address');
  t.ok(inList(compileIpList(['::/0']), '2001:db8::5'), '::/0 holds every IPv6 address');
  t.notOk(inList(compileIpList([]), '127.0.0.1'), 'an empty list holds nothing');

  for (const bad of ['nope', '1.2.3', '256.1.1.1', '1.2.3.4/33', '::1/129', '1.2.3.4/', '1.2.3.4/x', '10.0.0.0/-1', '1.2.3.4/24/1', '10.0.0.0/ 8', '/24', 'example.com']) {
    t.throws(() => compileIpList(['127.0.0.1', bad]), Error, `refuses ${JSON.stringify(bad)}`);
  }
});

t.test('canonicalIp: one spelling per address', async (t) => {
  const same: Array<[string, string[]]> = [
    ['127.0.0.1', ['127.0.0.1', '::ffff:127.0.0.1', '::ffff:7f00:1', '::FFFF:7F00:0001', '0:0:0:0:0:ffff:7f00:1', '64:ff9b::7f00:1', '64:ff9b::127.0.0.1', '0064:FF9B:0:0:0:0:7f00:1']],
    ['192.0.2.1', ['::ffff:192.0.2.1', '::ffff:c000:201', '64:ff9b::c000:201', '64:ff9b::192.0.2.1']],
    ['2001:db8::1', ['2001:db8::1', '2001:DB8:0:0::1', '2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1%eth0', '2001:db8:0:0:0:0:0.0.0.1']],
    ['2001:db8:0:1:1:1:1:1', ['2001:db8:0:1:1:1:1:1', '2001:DB8:0000:1:1:1:1:1']],
    ['2001:0:0:1::1', ['2001:0:0:1:0:0:0:1'], ], // the longer zero run is the one compressed
    ['2001:db8::1:0:0:1', ['2001:db8:0:0:1:0:0:1']], // on a tie, the first
    ['::1', ['::1', '0:0:0:0:0:0:0:1']],
    ['::', ['::', '0:0:0:0:0:0:0:0']],
    ['fe80::1', ['fe80::1%eth0', 'FE80::0:1%25']],
    // Kept as IPv6 on purpose: IPv4-compatible (deprecated), 6to4 and a NAT64 neighbour that is not the /96.
    ['::102:304', ['::1.2.3.4', '0:0:0:0:0:0:102:304']],
    ['2002:c000:201::1', ['2002:C000:0201::1']],
    ['64:ff9b:1::c000:201', ['64:ff9b:1:0:0:0:c000:201']],
    ['::ffff:0:c000:201', ['::ffff:0:192.0.2.1']],
  ];
  for (const [want, forms] of same) for (const f of forms) t.equal(canonicalIp(f), want, `${f} → ${want}`);
  for (const bad of ['', 'nope', '1.2.3', '01.2.3.4', '1.2.3.4 ', '[::1]', '1.2.3.4:80', '::1::2', 'g::1', '2001:db8::1/64']) {
    t.equal(canonicalIp(bad), undefined, `${JSON.stringify(bad)} is not an address`);
  }
});

t.test('forwardedAddress: an X-Forwarded-For entry loses its port and brackets', async (t) => {
  const cases: Array<[string, string | undefined]> = [
    ['198.51.100.7', '198.51.100.7'], [' 198.51.100.7 ', '198.51.100.7'], ['198.51.100.7:5678', '198.51.100.7'], ['198.51.100.7:0', '198.51.100.7'],
    ['[2001:db8::1]:443', '2001:db8::1'], ['[2001:DB8:0::1]', '2001:db8::1'], ['2001:db8::1', '2001:db8::1'],
    ['[::ffff:7f00:1]:80', '127.0.0.1'], ['::ffff:c000:201', '192.0.2.1'], ['64:ff9b::c000:201', '192.0.2.1'], ['fe80::1%eth0', 'fe80::1'],
    ['198.51.100.7:65536', undefined], ['198.51.100.7:', undefined], ['198.51.100.7:x', undefined], ['[198.51.100.7]', undefined],
    ['[2001:db8::1', undefined], ['[2001:db8::1]x', undefined], ['[2001:db8::1]:', undefined], ['unknown', undefined], ['', undefined], ['_hidden', undefined],
  ];
  for (const [hop, want] of cases) t.equal(forwardedAddress(hop), want, JSON.stringify(hop));
});

t.test('clientIp', async (t) => {
  const trusted = compileIpList(['127.0.0.1/8', '::1', '10.0.0.0/8']);
  const cases: Array<[string, string | undefined, string | string[] | undefined, string | null]> = [
    ['an untrusted peer is judged by its socket', '203.0.113.5', '198.51.100.1', '203.0.113.5'],
    ['an untrusted mapped peer, canonical', '::ffff:203.0.113.5', '198.51.100.1', '203.0.113.5'],
    ['an untrusted hex-mapped peer, canonical', '::ffff:cb00:7105', '198.51.100.1', '203.0.113.5'],
    ['an untrusted v6 peer, canonical', '2001:DB8:0:0::9', '198.51.100.1', '2001:db8::9'],
    ['an untrusted peer with garbage XFF: its socket, no refusal', '203.0.113.5', 'garbage', '203.0.113.5'],
    ['trusted peer without XFF', '127.0.0.1', undefined, '127.0.0.1'],
    ['trusted peer with an empty XFF', '127.0.0.1', '', '127.0.0.1'],
    ['trusted peer: the XFF entry', '127.0.0.1', '198.51.100.7', '198.51.100.7'],
    ['trusted peer: right-most untrusted entry', '127.0.0.1', '192.0.2.66, 198.51.100.7, 10.0.0.3', '198.51.100.7'],
    ['trusted proxies chained', '10.2.3.4', '198.51.100.7,10.0.0.3,127.0.0.5', '198.51.100.7'],
    ['a spoofed left entry is never believed', '127.0.0.1', '1.1.1.1, 203.0.113.50', '203.0.113.50'],
    ['junk left of the client is never read', '127.0.0.1', 'junk, 203.0.113.50', '203.0.113.50'],
    ['a mapped trusted peer', '::ffff:127.0.0.1', '198.51.100.7', '198.51.100.7'],
    ['a hex-mapped trusted peer', '::ffff:7f00:1', '198.51.100.7', '198.51.100.7'],
    ['a v6 trusted peer, a v6 client', '::1', '2001:db8::abc', '2001:db8::abc'],
    ['a mapped XFF entry is canonical', '127.0.0.1', '::ffff:198.51.100.8', '198.51.100.8'],
    ['a hex-mapped XFF entry is canonical', '127.0.0.1', '::ffff:c633:6408', '198.51.100.8'],
    ['a NAT64 XFF entry is its IPv4', '127.0.0.1', '64:ff9b::c633:6408', '198.51.100.8'],
    ['an uppercase v6 entry is canonical', '127.0.0.1', '2001:DB8:0:0::1', '2001:db8::1'],
    ['an address with a port loses it', '127.0.0.1', '198.51.100.7:443', '198.51.100.7'],
    ['a bracketed v6 with a port loses it', '127.0.0.1', '[2001:db8::1]:443', '2001:db8::1'],
    ['a trusted hop with a port is still trusted', '127.0.0.1', '198.51.100.7, 10.0.0.3:8080', '198.51.100.7'],
    ['all hops trusted: the left-most', '127.0.0.1', '10.0.0.9, 10.0.0.8', '10.0.0.9'],
    ['all hops trusted, mapped left-most', '127.0.0.1', '::ffff:10.0.0.9, 10.0.0.8', '10.0.0.9'],
    ['garbage from a trusted peer: refused', '127.0.0.1', 'not-an-ip', null],
    ['garbage at the right: refused', '127.0.0.1', '198.51.100.7, garbage', null],
    ['garbage behind trusted hops: refused', '127.0.0.1', 'garbage, 10.0.0.3', null],
    ['an empty hop: refused', '127.0.0.1', '198.51.100.7,,', null],
    ['a bad port: refused', '127.0.0.1', '198.51.100.7:99999', null],
    ['repeated headers read as one list', '127.0.0.1', ['192.0.2.1', '198.51.100.2, 10.0.0.1'], '198.51.100.2'],
    ['no socket address', undefined, '198.51.100.7', ''],
  ];
  for (const [name, peer, xff, want] of cases) t.equal(clientIp(peer, xff, trusted), want, name);
  t.equal(clientIp('198.51.100.7', '10.0.0.1', compileIpList([])), '198.51.100.7', 'nothing trusted: XFF ignored');
  t.equal(clientIp('127.0.0.1', '10.0.0.1', compileIpList([''])), '127.0.0.1', 'an empty SLUICE_TRUSTED_PROXIES trusts not even loopback');
});

t.test('compileIpList: mapped and NAT64 entries match the IPv4 spelling clients arrive in', async (t) => {
  const list = compileIpList(['::ffff:192.0.2.0/120', '64:ff9b::198.51.100.0/120', '64:ff9b::c633:6501']);
  for (const ip of ['192.0.2.1', '192.0.2.255', '198.51.100.9', '198.51.101.1']) t.ok(inList(list, ip), `${ip} in the list`);
  for (const ip of ['192.0.3.1', '198.51.101.2', '203.0.113.1']) t.notOk(inList(list, ip), `${ip} not in the list`);
  t.ok(inList(compileIpList(['64:ff9b::/96']), '203.0.113.1'), 'the NAT64 /96 holds every IPv4 address that comes through it');
  t.notOk(inList(compileIpList(['64:ff9b:1::/48']), '203.0.113.1'), 'a local-use NAT64 prefix is plain IPv6');
  t.ok(inList(compileIpList(['::ffff:0:0/96']), '203.0.113.1'), 'the mapped /96 holds every IPv4 address');
});

t.test('ipBlockBucket', async (t) => {
  t.equal(ipBlockBucket('203.0.113.9'), '203.0.113.9', 'IPv4 whole');
  t.equal(ipBlockBucket('::ffff:203.0.113.9'), '203.0.113.9', 'IPv4-mapped counts as its IPv4');
  t.not(ipBlockBucket('203.0.113.9'), ipBlockBucket('203.0.113.10'));

  const same64 = [
    '2001:db8:1:2:3:4:5:6', '2001:0db8:0001:0002:0000:0000:0000:0000', '2001:db8:1:2::', '2001:db8:1:2::abcd',
    '2001:DB8:1:2:FFFF::1', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:db8:1:2::192.0.2.1', '2001:db8:1:2::%eth0',
  ];
  for (const ip of same64) t.equal(ipBlockBucket(ip), '2001:db8:1:2::/64', ip);
  for (const ip of ['2001:db8:1:3::', '2001:db8:1::2', '2001:db8::1:2', '2001:db8:2:2::', '2001:db9:1:2::']) {
    t.not(ipBlockBucket(ip), '2001:db8:1:2::/64', `${ip} is another /64`);
  }
  const zeros = ['2001:db8::', '2001:db8::1', '2001:db8:0:0:1::', '2001:db8:0:0::ffff', '2001:0db8:0000:0000:0000:0000:0000:0001'];
  for (const ip of zeros) t.equal(ipBlockBucket(ip), ipBlockBucket('2001:db8::'), `${ip} shares 2001:db8::/64`);
  t.not(ipBlockBucket('2001:db8:0:1::'), ipBlockBucket('2001:db8::'));
  t.equal(ipBlockBucket('::'), ipBlockBucket('::1'), ':: and ::1 share the zero /64');
  t.equal(ipBlockBucket('fe80::1%eth0'), ipBlockBucket('fe80::2'), 'a zone index is not part of the network');
  // An embedded IPv4 tail is two groups: here the fourth group is 3, not 2.
  t.equal(ipBlockBucket('1::2:3:4:5:1.2.3.4'), ipBlockBucket('1:0:2:3:4:5:102:304'));
  t.equal(ipBlockBucket('1::2:3:4:5:1.2.3.4'), '1:0:2:3::/64');
  // Every spelling of one IPv4 address is one bucket: mapped (dotted and hex) and NAT64.
  for (const ip of ['::ffff:198.51.100.7', '::ffff:c633:6407', '64:ff9b::198.51.100.7', '64:ff9b::c633:6407']) t.equal(ipBlockBucket(ip), '198.51.100.7', ip);
  t.equal(ipBlockBucket('64:ff9b:1::198.51.100.7'), '64:ff9b:1:0::/64', 'a local-use NAT64 prefix is plain IPv6');

  const buckets = new Set<string>();
  for (let i = 0; i < 50; i++) buckets.add(ipBlockBucket(`2001:db8:aa:${i.toString(16)}::${(i * 7919).toString(16)}`));
  t.equal(buckets.size, 50, 'fifty /64s, fifty buckets');
});
