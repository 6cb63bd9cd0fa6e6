// What request bodies may hold in memory while they arrive. A key may be receiving at most as many
// bodies at once as its per-minute limit and at most PER_KEY_BYTES of them; the process at most
// TOTAL_BYTES. A body is admitted when its headers are through (its declared content-length
// reserved at once) and grows chunk by chunk; one that would pass a bound is refused then (429 in
// its dialect, as a rate limit), not once it is all in memory. The reservation ends with the read:
// a complete body is counted by the rate limit like any request.

import { GatewayError } from './errors.ts';

/** The bytes one key's bodies may hold while they arrive: two bodies of the 32 MiB maximum. */
export const PER_KEY_BYTES = 64 * 1024 * 1024;
/** The bytes every body arriving at once may hold, all keys together. */
export const TOTAL_BYTES = 256 * 1024 * 1024;

interface Held {
  bodies: number;
  bytes: number;
}

/** One body's reservation: grow it as chunks arrive, end it once (read, refused or abandoned). */
export interface Reservation {
  /** Counts `n` more bytes received; throws the refusal when the body passes a bound. */
  grow(n: number): void;
  end(): void;
}

export class Intake {
  private readonly byKey = new Map<number, Held>();
  private total = 0;
  private readonly o: { perKeyBytes: number; totalBytes: number };

  constructor(o: { perKeyBytes?: number; totalBytes?: number } = {}) {
    this.o = { perKeyBytes: o.perKeyBytes ?? PER_KEY_BYTES, totalBytes: o.totalBytes ?? TOTAL_BYTES };
  }

  /** Bytes held by bodies arriving now, all keys together. */
  get bytes(): number {
    return this.total;
  }

  /**
   * Admits a body of `key` (whose window allows `maxBodies` requests a minute), reserving the
   * `declared` bytes its content-length announces. Throws the refusal when the key or the process
   * has no room.
   */
  admit(key: number, maxBodies: number, declared: number): Reservation {
    let held = this.byKey.get(key);
    if ((held?.bodies ?? 0) >= maxBodies) throw refusal(`More request bodies of this key are arriving at once than its limit of ${maxBodies} a minute.`);
    if (!held) this.byKey.set(key, (held = { bodies: 0, bytes: 0 }));
    held.bodies++;
    const room = new Room(this, key, held);
    try {
      room.reserve(declared);
    } catch (err) {
      room.end();
      throw err;
    }
    return room;
  }

  /** Takes `n` more bytes for a body of `held`; throws the refusal when a bound would be passed. */
  take(held: Held, n: number): void {
    if (held.bytes + n > this.o.perKeyBytes) throw refusal(`The request bodies of this key arriving at once pass ${mib(this.o.perKeyBytes)}.`);
    if (this.total + n > this.o.totalBytes) throw refusal(`The gateway is receiving ${mib(this.o.totalBytes)} of request bodies at once; retry shortly.`);
    held.bytes += n;
    this.total += n;
  }

  /** Gives back a body's bytes and its place among its key's bodies. */
  release(key: number, held: Held, bytes: number): void {
    held.bodies--;
    held.bytes -= bytes;
    this.total -= bytes;
    if (held.bodies === 0) this.byKey.delete(key);
  }
}

/** One body's reservation: one object per request, no closures. */
class Room implements Reservation {
  private readonly intake: Intake;
  private readonly key: number;
  private readonly held: Held;
  /** Bytes reserved: the declared length, or what arrived when that is more. */
  private reserved = 0;
  private received = 0;
  private ended = false;

  constructor(intake: Intake, key: number, held: Held) {
    this.intake = intake;
    this.key = key;
    this.held = held;
  }

  reserve(upTo: number): void {
    if (upTo <= this.reserved) return;
    this.intake.take(this.held, upTo - this.reserved);
    this.reserved = upTo;
  }

  grow(n: number): void {
    this.received += n;
    this.reserve(this.received);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.intake.release(this.key, this.held, this.reserved);
  }
}

/** The 429 of a body with no room: it closes the connection, so the rest of the body is not read. */
function refusal(message: string): GatewayError {
  return new GatewayError('rate_limit_exceeded', { message, headers: { connection: 'close' } });
}

function mib(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MiB` : `${bytes} bytes`;
}
