// The list of open exchanges (lib/proxy/open-list.ts): held against a Set under seeded random adds
// and deletes, a second delete and a stranger's delete do nothing, and a snapshot can be walked
// while its members remove themselves (the shutdown's interrupt does exactly that).

import t from 'tap';
import { OpenList } from '../../../lib/proxy/open-list.ts';
import { mulberry32 } from '../../helpers/random.ts';

interface Item { id: number; slot: number }
const item = (id: number): Item => ({ id, slot: -1 });

const ids = (list: OpenList<Item>) => list.snapshot().map((i) => i.id).sort((a, b) => a - b);

t.test('random adds and deletes keep the same members as a Set', async (t) => {
  for (const seed of [1, 2, 3, 42, 1234]) {
    const rnd = mulberry32(seed);
    const list = new OpenList<Item>();
    const ref = new Set<Item>();
    const all: Item[] = [];
    for (let step = 0; step < 5000; step++) {
      if (rnd() < 0.55 || all.length === 0) {
        const it = item(step);
        all.push(it);
        list.add(it);
        ref.add(it);
      } else {
        const it = all[Math.floor(rnd() * all.length)]!;
        list.delete(it);
        ref.delete(it);
      }
      if (list.size !== ref.size) t.fail(`seed ${seed}, step ${step}: size ${list.size}, expected ${ref.size}`);
    }
    t.same(ids(list), [...ref].map((i) => i.id).sort((a, b) => a - b), `seed ${seed}: same members`);
    const snap = list.snapshot();
    t.equal(snap.filter((it, i) => it.slot !== i).length, 0, `seed ${seed}: each item knows its slot`);
  }
});

t.test('a second delete, or a delete of an item never added, does nothing', async (t) => {
  const list = new OpenList<Item>();
  const [a, b, c] = [item(1), item(2), item(3)];
  list.add(a);
  list.add(b);
  list.add(c);
  list.delete(a);
  t.equal(a.slot, -1, 'a removed item has no slot');
  list.delete(a);
  t.same(ids(list), [2, 3], 'the second delete took nothing else');
  const stranger = item(9);
  stranger.slot = 0; // a slot that holds another item
  list.delete(stranger);
  list.delete(item(10));
  t.same(ids(list), [2, 3], 'strangers take nothing');
});

t.test('a snapshot can be walked while each member deletes itself', async (t) => {
  const list = new OpenList<Item>();
  for (let i = 0; i < 10; i++) list.add(item(i));
  const seen: number[] = [];
  for (const it of list.snapshot()) {
    seen.push(it.id);
    list.delete(it);
  }
  t.same(seen.sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 'every member visited once');
  t.equal(list.size, 0, 'none left');
  t.same(list.snapshot(), [], 'an empty snapshot');
});
