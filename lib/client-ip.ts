// Client addresses: which peer to believe (CONTRACT §3), IP/CIDR lists compiled once into
// net.BlockList, and the bucket an address counts in for the IP block (IPv6 per /64).
// Lists are compiled at start-up or key load, never per request.

import { BlockList, isIPv4, isIPv6 } from 'node:net';

/** Strips the IPv4-mapped IPv6 form (`::ffff:1.2.3.4`) that dual-stack sockets report. */
export function normalizeIp(ip: string): string {
  return ip.startsWith('::ffff:') && isIPv4(ip.slice(7)) ? ip.slice(7) : ip;
}

/** Compiles IPs and CIDRs (v4 and v6). Throws on an entry that is neither. */
export function compileIpList(entries: string[]): BlockList {
  const list = new BlockList();
  for (const raw of entries) {
    const entry = raw.trim();
    if (!entry) continue;
    const [addr, bits, extra] = entry.split('/');
    const type = isIPv4(addr) ? 'ipv4' : isIPv6(addr) ? 'ipv6' : undefined;
    if (!type || extra !== undefined) throw new Error(`not an IP address or CIDR: ${entry}`);
    if (bits === undefined) {
      list.addAddress(addr, type);
      continue;
    }
    const prefix = Number(bits);
    if (!/^\d+$/.test(bits) || prefix > (type === 'ipv4' ? 32 : 128)) throw new Error(`bad CIDR prefix: ${entry}`);
    list.addSubnet(addr, prefix, type);
  }
  return list;
}

export function inList(list: BlockList, ip: string): boolean {
  const type = isIPv4(ip) ? 'ipv4' : isIPv6(ip) ? 'ipv6' : undefined;
  return type !== undefined && list.check(ip, type);
}

/**
 * The client IP: a peer that is not a trusted proxy is judged by its socket address whatever it
 * claims; behind trusted proxies, the right-most X-Forwarded-For entry that is not itself trusted.
 */
export function clientIp(socketAddress: string | undefined, xff: string | string[] | undefined, trusted: BlockList): string {
  const peer = normalizeIp(socketAddress ?? '');
  if (!xff || !inList(trusted, peer)) return peer;
  const hops = (Array.isArray(xff) ? xff.join(',') : xff).split(',');
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normalizeIp(hops[i].trim());
    if (!isIPv4(hop) && !isIPv6(hop)) return peer; // garbage in the header: believe only the socket
    if (!inList(trusted, hop)) return hop;
  }
  return normalizeIp(hops[0].trim());
}

/** The bucket an address counts in for the auth-failure block: IPv4 whole, IPv6 by its /64. */
export function ipBlockBucket(ip: string): string {
  ip = normalizeIp(ip);
  // Every IPv6 address has a colon and no IPv4 one does: the common case skips the IPv6 grammar.
  if (!ip.includes(':') || !isIPv6(ip)) return ip;
  const zone = ip.indexOf('%');
  if (zone >= 0) ip = ip.slice(0, zone); // a zone index names the interface, not the network
  // An embedded IPv4 tail (`::1.2.3.4`) stands for two groups; spell it as hex so the count is right.
  const last = ip.lastIndexOf(':');
  if (ip.includes('.', last)) {
    const [a, b, c, d] = ip.slice(last + 1).split('.').map(Number);
    ip = `${ip.slice(0, last + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail = ''] = ip.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  return `${groups.slice(0, 4).map((g) => parseInt(g || '0', 16).toString(16)).join(':')}::/64`;
}
