package ebpf

import "slices"

// chunkSlots is the number of backend slots one element of the backends
// map holds (BE_CHUNK of bpf/sock.c): element {ID, c} holds slots
// chunkSlots·c … chunkSlots·c+chunkSlots−1 of group ID, an empty slot the
// zero BackendValue. Maps and Ops list slots; an executor packs them.
const chunkSlots = 8

// chunkKey is a key of the backends map (struct be_key of bpf/sock.c).
type chunkKey struct {
	ID    uint32
	Chunk uint32
}

// backendChunk is a value of the backends map (struct be_chunk).
type backendChunk [chunkSlots]BackendValue

// chunkOf is the element that holds slot k, and k's index in it.
func chunkOf(k BackendKey) (chunkKey, int) {
	return chunkKey{k.ID, k.Slot / chunkSlots}, int(k.Slot % chunkSlots)
}

// chunkOfKey is the element that holds slot k.
func chunkOfKey(k BackendKey) chunkKey { return chunkKey{k.ID, k.Slot / chunkSlots} }

// empty reports whether c holds no backend.
func (c *backendChunk) empty() bool { return *c == backendChunk{} }

// chunkWrites are the element changes of the backends map that apply the
// slot changes of Ops, in two steps around the services' changes: Put
// before the services are written (the chunks that gain or change slots,
// with the slots the services may still point at), Clear and Delete after
// the services stop pointing at slots (the chunks that lose slots, written
// without them, or deleted when they hold none).
type chunkWrites struct {
	PutKeys, ClearKeys []chunkKey
	PutValues          []backendChunk
	ClearValues        []backendChunk
	Delete             []chunkKey
}

// packBackends turns slot puts and deletions into chunkWrites, each chunk
// starting from current's answer for it (what the map holds: the zero
// chunk for one it lacks). The puts of one chunk must be consecutive, as
// Diff, Changes and AllOps list them. current is asked once per chunk,
// in the order the chunks first appear in puts, then in dels.
func packBackends(puts []Entry[BackendKey, BackendValue], dels []BackendKey, current func(chunkKey) (backendChunk, error)) (chunkWrites, error) {
	var w chunkWrites
	n := 0
	for i, e := range puts {
		if ck, _ := chunkOf(e.Key); i == 0 || ck != chunkOfKey(puts[i-1].Key) {
			n++
		}
	}
	all := make([]backendChunk, 0, n)
	keys := make([]chunkKey, 0, n)
	for _, e := range puts {
		ck, slot := chunkOf(e.Key)
		if len(keys) == 0 || keys[len(keys)-1] != ck {
			c, err := current(ck)
			if err != nil {
				return chunkWrites{}, err
			}
			all, keys = append(all, c), append(keys, ck)
		}
		all[len(all)-1][slot] = e.Value
	}
	w.PutKeys, w.PutValues = keys[:len(keys):len(keys)], all[:len(all):len(all)]
	if len(dels) == 0 {
		return w, nil
	}
	w.PutValues = slices.Clone(w.PutValues)
	index := make(map[chunkKey]int, len(keys)+len(dels))
	for i, k := range keys {
		index[k] = i
	}
	var order []chunkKey
	cleared := make(map[chunkKey]bool, len(dels))
	for _, k := range dels {
		ck, slot := chunkOf(k)
		i, ok := index[ck]
		if !ok {
			c, err := current(ck)
			if err != nil {
				return chunkWrites{}, err
			}
			i, all = len(all), append(all, c)
			index[ck] = i
		}
		all[i][slot] = BackendValue{}
		if !cleared[ck] {
			cleared[ck] = true
			order = append(order, ck)
		}
	}
	for _, ck := range order {
		c := all[index[ck]]
		if c.empty() {
			w.Delete = append(w.Delete, ck)
		} else {
			w.ClearKeys, w.ClearValues = append(w.ClearKeys, ck), append(w.ClearValues, c)
		}
	}
	return w, nil
}

// fromSlots is current for packBackends over the slots of m.
func fromSlots(m map[BackendKey]BackendValue) func(chunkKey) (backendChunk, error) {
	return func(ck chunkKey) (backendChunk, error) {
		var c backendChunk
		for i := range c {
			c[i] = m[BackendKey{ck.ID, ck.Chunk*chunkSlots + uint32(i)}]
		}
		return c, nil
	}
}
