// The exchanges still open, for the shutdown to end. An array with each member's slot on the
// member: adding and removing allocate nothing and leave no reference behind.
//
// Not a Set: a Set with an add and a delete per request rehashes into a new table every few
// dozen requests, and V8 links each old table to its successor (for live iterators) and keeps
// the old table's entries. Once one table reaches the old generation, each scavenge keeps its
// successor, and every exchange in it, alive through the dead table: the whole request graph of
// every request was promoted, ~2 MB per scavenge at 4,000 requests a second, until a major GC
// (docs/benchmarks.md, "Where the promotion came from").

export interface Slotted {
  /** Index in the list, -1 when not in it. */
  slot: number;
}

export class OpenList<T extends Slotted> {
  private readonly items: T[] = [];

  get size(): number {
    return this.items.length;
  }

  add(item: T): void {
    item.slot = this.items.length;
    this.items.push(item);
  }

  /** Removes the item (the last one takes its slot); a second call does nothing. */
  delete(item: T): void {
    const i = item.slot;
    if (i < 0 || this.items[i] !== item) return;
    const last = this.items.pop()!;
    if (last !== item) {
      this.items[i] = last;
      last.slot = i;
    }
    item.slot = -1;
  }

  /** A copy to iterate while members remove themselves. */
  snapshot(): T[] {
    return this.items.slice();
  }
}
