// Client addresses: which peer to believe, every address spelled one canonical way, IP/CIDR lists
// compiled once into net.BlockList, and the bucket an address counts in for the IP block and the
// per-address connection cap (IPv6 per /64). Lists are compiled at start-up or key load, never per
// request.
//
// One address, one spelling: an IPv4 address arrives as itself, as IPv4-mapped IPv6 (dotted
// `::ffff:1.2.3.4` or hex `::ffff:102:304`, what dual-stack sockets report) or through the NAT64
// well-known prefix (`64:ff9b::1.2.3.4`, RFC 6052); all three are the IPv4 address. IPv6 is written
// lowercase and compressed (RFC 5952), without a zone id. Left alone on purpose: IPv4-compatible
// `::a.b.c.d` (deprecated, never on the wire) and 6to4 `2002::/16` or Teredo, whose embedded IPv4
// names a relay or a site, not the client: they stay IPv6 and count per /64 like any IPv6.

import { BlockList, isIPv4, isIPv6 } from 'node:net';

/** The canonical spelling of an IP address (see the header), or undefined when it is not one. */
export function canonicalIp(raw: string): string | undefined {
  // The common cases first: plain IPv4, and the dotted mapped form a dual-stack socket reports.
  if (!raw.includes(':')) return isIPv4(raw) ? raw : undefined;
  if (raw.startsWith('::ffff:') && isIPv4(raw.slice(7))) return raw.slice(7);
  const groups = v6Groups(raw);
  if (!groups) return undefined;
  const v4 = embeddedV4(groups);
  return v4 ?? compress(groups);
}

/** The eight 16-bit groups of an IPv6 address (zone id dropped), or undefined when it is not one. */
function v6Groups(raw: string): number[] | undefined {
  const zone = raw.indexOf('%');
  let ip = zone >= 0 ? raw.slice(0, zone) : raw;
  if (!isIPv6(ip)) return undefined;
  // An embedded IPv4 tail (`…:1.2.3.4`) stands for the last two groups: spell it as hex.
  const last = ip.lastIndexOf(':');
  if (ip.includes('.', last)) {
    const [a, b, c, d] = ip.slice(last + 1).split('.').map(Number);
    ip = `${ip.slice(0, last + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const double = ip.indexOf('::');
  const part = (s: string) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  if (double < 0) return part(ip);
  const head = part(ip.slice(0, double));
  const tail = part(ip.slice(double + 2));
  return [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

/** The IPv4 address inside ::ffff:0:0/96 (mapped) or 64:ff9b::/96 (NAT64), else undefined. */
function embeddedV4(g: number[]): string | undefined {
  const mapped = g[0] === 0 && g[1] === 0 && g[5] === 0xffff;
  const nat64 = g[0] === 0x64 && g[1] === 0xff9b && g[5] === 0;
  if (!(mapped || nat64) || g[2] !== 0 || g[3] !== 0 || g[4] !== 0) return undefined;
  return `${g[6] >> 8}.${g[6] & 255}.${g[7] >> 8}.${g[7] & 255}`;
}

/** RFC 5952: lowercase hex without leading zeros, the longest run of two or more zero groups as `::`. */
function compress(g: number[]): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  const hex = g.map((n) => n.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/**
 * Compiles IPs and CIDRs (v4 and v6). Throws on an entry that is neither. An IPv6 entry that
 * covers mapped or NAT64 addresses covers their IPv4 spelling too, since that is how they arrive.
 */
export function compileIpList(entries: string[]): BlockList {
  const list = new BlockList();
  for (const raw of entries) {
    const entry = raw.trim();
    if (!entry) continue;
    const [addr, bits, extra] = entry.split('/');
    const type = isIPv4(addr) ? 'ipv4' : isIPv6(addr) ? 'ipv6' : undefined;
    if (!type || extra !== undefined) throw new Error(`not an IP address or CIDR: ${entry}`);
    const max = type === 'ipv4' ? 32 : 128;
    if (bits !== undefined && (!/^\d+$/.test(bits) || Number(bits) > max)) throw new Error(`bad CIDR prefix: ${entry}`);
    const prefix = bits === undefined ? max : Number(bits);
    list.addSubnet(addr, prefix, type);
    if (type === 'ipv6') {
      const v4 = v4Equivalent(v6Groups(addr)!, prefix);
      if (v4) list.addSubnet(v4.addr, v4.prefix, 'ipv4');
    }
  }
  return list;
}

/** The IPv4 range a v6 subnet covers through the mapped or NAT64 prefix (both /96), if any. */
function v4Equivalent(g: number[], prefix: number): { addr: string; prefix: number } | undefined {
  if (prefix >= 96) {
    const v4 = embeddedV4(g);
    return v4 ? { addr: v4, prefix: prefix - 96 } : undefined;
  }
  // A shorter prefix holding the whole NAT64 /96 holds every IPv4 address that came through it.
  // (The mapped /96 needs nothing: BlockList already matches IPv4 against subnets holding it.)
  const nat64 = [0x64, 0xff9b, 0, 0, 0, 0, 0, 0];
  for (let bit = 0; bit < prefix; bit++) {
    const i = bit >> 4;
    const mask = 0x8000 >> (bit & 15);
    if ((g[i] & mask) !== (nat64[i] & mask)) return undefined;
  }
  return { addr: '0.0.0.0', prefix: 0 };
}

/** Whether a canonical address is in a compiled list. */
export function inList(list: BlockList, ip: string): boolean {
  const type = isIPv4(ip) ? 'ipv4' : isIPv6(ip) ? 'ipv6' : undefined;
  return type !== undefined && list.check(ip, type);
}

const PORT = /^\d{1,5}$/;

/**
 * One X-Forwarded-For entry as a canonical address: a port (`1.2.3.4:5678`, `[2001:db8::1]:443`)
 * is dropped, as are brackets and a zone id. Undefined when the entry is not an address.
 */
export function forwardedAddress(hop: string): string | undefined {
  let s = hop.trim();
  if (s.startsWith('[')) {
    const end = s.indexOf(']');
    const rest = end < 0 ? '' : s.slice(end + 1);
    if (end < 0 || (rest !== '' && !(rest[0] === ':' && PORT.test(rest.slice(1)) && Number(rest.slice(1)) <= 65535))) return undefined;
    const inner = s.slice(1, end);
    return inner.includes(':') ? canonicalIp(inner) : undefined; // brackets hold IPv6 only
  }
  const colon = s.indexOf(':');
  if (colon >= 0 && colon === s.lastIndexOf(':')) {
    // One colon: IPv4 with a port (any IPv6 address has at least two colons).
    const port = s.slice(colon + 1);
    if (!PORT.test(port) || Number(port) > 65535) return undefined;
    s = s.slice(0, colon);
    return isIPv4(s) ? s : undefined;
  }
  return canonicalIp(s);
}

/**
 * The client IP, canonical. A peer that is not a trusted proxy is judged by its socket address
 * whatever it claims; behind trusted proxies, the right-most X-Forwarded-For entry that is not
 * itself trusted (all trusted: the left-most). Null when a trusted peer's X-Forwarded-For cannot
 * be read up to that entry: the caller refuses the request rather than take the proxy's own
 * address, which would merge every client behind it into one. Entries left of the client's are
 * never read, so junk a client planted there costs nothing.
 */
export function clientIp(socketAddress: string | undefined, xff: string | string[] | undefined, trusted: BlockList): string | null {
  const peer = socketAddress ? (canonicalIp(socketAddress) ?? socketAddress) : '';
  if (!xff || !inList(trusted, peer)) return peer;
  const hops = (Array.isArray(xff) ? xff.join(',') : xff).split(',');
  let hop: string | undefined;
  for (let i = hops.length - 1; i >= 0; i--) {
    hop = forwardedAddress(hops[i]);
    if (hop === undefined) return null;
    if (!inList(trusted, hop)) return hop;
  }
  return hop!;
}

/** The bucket an address counts in for the IP block and the per-address cap: IPv4 whole, IPv6 by its /64. */
export function ipBlockBucket(ip: string): string {
  // Every IPv6 address has a colon and no IPv4 one does: the common case skips the IPv6 grammar.
  if (!ip.includes(':')) return ip;
  const canonical = canonicalIp(ip);
  if (canonical === undefined) return ip;
  if (!canonical.includes(':')) return canonical; // mapped or NAT64: its IPv4 address
  const groups = v6Groups(canonical)!;
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(':')}::/64`;
}
