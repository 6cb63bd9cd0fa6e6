// Client addresses (CONTRACT §3): IP/CIDR lists compiled for v4 and v6 (bad entries refused),
// which X-Forwarded-For entry to believe behind trusted proxies (and never from an untrusted
// peer), IPv4-mapped socket addresses, and the IP-block bucket (IPv4 whole, IPv6 per /64,
// whatever `::` compression or embedded IPv4 spelling the same /64 arrives in).

import t from 'tap';
import { clientIp, compileIpList, inList, ipBlockBucket, normalizeIp } from '../../lib/client-ip.ts';

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

t.test('normalizeIp', async (t) => {
  t.equal(normalizeIp('::ffff:192.0.2.1'), '192.0.2.1');
  t.equal(normalizeIp('192.0.2.1'), '192.0.2.1');
  t.equal(normalizeIp('::ffff:1'), '::ffff:1', 'not a mapped address: unchanged');
  t.equal(normalizeIp('2001:db8::1'), '2001:db8::1');
});

t.test('clientIp', async (t) => {
  const trusted = compileIpList(['127.0.0.1/8', '::1', '10.0.0.0/8']);
  const cases: Array<[string, string | undefined, string | string[] | undefined, string]> = [
    ['an untrusted peer is judged by its socket', '203.0.113.5', '198.51.100.1', '203.0.113.5'],
    ['an untrusted mapped peer, normalised', '::ffff:203.0.113.5', '198.51.100.1', '203.0.113.5'],
    ['an untrusted v6 peer', '2001:db8::9', '198.51.100.1', '2001:db8::9'],
    ['trusted peer without XFF', '127.0.0.1', undefined, '127.0.0.1'],
    ['trusted peer with an empty XFF', '127.0.0.1', '', '127.0.0.1'],
    ['trusted peer: the XFF entry', '127.0.0.1', '198.51.100.7', '198.51.100.7'],
    ['trusted peer: right-most untrusted entry', '127.0.0.1', '192.0.2.66, 198.51.100.7, 10.0.0.3', '198.51.100.7'],
    ['trusted proxies chained', '10.2.3.4', '198.51.100.7,10.0.0.3,127.0.0.5', '198.51.100.7'],
    ['a spoofed left entry is never believed', '127.0.0.1', '1.1.1.1, 203.0.113.50', '203.0.113.50'],
    ['a mapped trusted peer', '::ffff:127.0.0.1', '198.51.100.7', '198.51.100.7'],
    ['a v6 trusted peer, a v6 client', '::1', '2001:db8::abc', '2001:db8::abc'],
    ['a mapped XFF entry is normalised', '127.0.0.1', '::ffff:198.51.100.8', '198.51.100.8'],
    ['all hops trusted: the left-most', '127.0.0.1', '10.0.0.9, 10.0.0.8', '10.0.0.9'],
    ['all hops trusted, mapped left-most', '127.0.0.1', '::ffff:10.0.0.9, 10.0.0.8', '10.0.0.9'],
    ['garbage: the peer', '127.0.0.1', 'not-an-ip', '127.0.0.1'],
    ['garbage at the right: the peer', '127.0.0.1', '198.51.100.7, garbage', '127.0.0.1'],
    ['an address with a port is garbage', '127.0.0.1', '198.51.100.7:443', '127.0.0.1'],
    ['an empty hop is garbage', '127.0.0.1', '198.51.100.7,,', '127.0.0.1'],
    ['repeated headers read as one list', '127.0.0.1', ['192.0.2.1', '198.51.100.2, 10.0.0.1'], '198.51.100.2'],
    ['no socket address', undefined, '198.51.100.7', ''],
  ];
  for (const [name, peer, xff, want] of cases) t.equal(clientIp(peer, xff, trusted), want, name);
  t.equal(clientIp('198.51.100.7', '10.0.0.1', compileIpList([])), '198.51.100.7', 'nothing trusted: XFF ignored');
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
  t.equal(ipBlockBucket('64:ff9b::198.51.100.7'), '64:ff9b:0:0::/64');

  const buckets = new Set<string>();
  for (let i = 0; i < 50; i++) buckets.add(ipBlockBucket(`2001:db8:aa:${i.toString(16)}::${(i * 7919).toString(16)}`));
  t.equal(buckets.size, 50, 'fifty /64s, fifty buckets');
});
