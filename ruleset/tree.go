package ruleset

// keyed is a key type ordered by its Compare method.
type keyed[K any] interface{ Compare(K) int }

// tree is a persistent (immutable) AVL tree: with and without return a new
// tree that shares every node but the O(log n) ones on the path to the key,
// so that a Ruleset made from another by Update costs time and memory
// proportional to the change, and both stay valid. The zero tree is empty.
type tree[K keyed[K], V any] struct {
	root *node[K, V]
	len  int
}

type node[K keyed[K], V any] struct {
	key         K
	val         V
	left, right *node[K, V]
	height      int8
}

// treeFromSorted builds a balanced tree of n entries, entry i being at(i),
// whose keys are in increasing order, each once: O(n).
func treeFromSorted[K keyed[K], V any](n int, at func(i int) (K, V)) tree[K, V] {
	// One allocation for all nodes: a Build makes many.
	nodes := make([]node[K, V], n)
	var build func(lo, hi int) *node[K, V]
	build = func(lo, hi int) *node[K, V] {
		if lo >= hi {
			return nil
		}
		mid := int(uint(lo+hi) >> 1)
		nd := &nodes[mid]
		nd.key, nd.val = at(mid)
		nd.left, nd.right = build(lo, mid), build(mid+1, hi)
		nd.height = 1 + max(height(nd.left), height(nd.right))
		return nd
	}
	return tree[K, V]{root: build(0, n), len: n}
}

// get returns the value of key.
func (t tree[K, V]) get(key K) (V, bool) {
	n := t.root
	for n != nil {
		c := key.Compare(n.key)
		switch {
		case c < 0:
			n = n.left
		case c > 0:
			n = n.right
		default:
			return n.val, true
		}
	}
	var zero V
	return zero, false
}

// with returns a tree in which key maps to val.
func (t tree[K, V]) with(key K, val V) tree[K, V] {
	root, added := insert(t.root, key, val)
	if added {
		t.len++
	}
	t.root = root
	return t
}

// without returns a tree without key.
func (t tree[K, V]) without(key K) tree[K, V] {
	root, removed := remove(t.root, key)
	if removed {
		t.root = root
		t.len--
	}
	return t
}

// all calls yield with every key and value in increasing key order until
// yield returns false.
func (t tree[K, V]) all(yield func(K, V) bool) {
	walk(t.root, yield)
}

func walk[K keyed[K], V any](n *node[K, V], yield func(K, V) bool) bool {
	for n != nil {
		if !walk(n.left, yield) || !yield(n.key, n.val) {
			return false
		}
		n = n.right
	}
	return true
}

func height[K keyed[K], V any](n *node[K, V]) int8 {
	if n == nil {
		return 0
	}
	return n.height
}

// mk makes a node over two subtrees whose heights differ by at most one.
func mk[K keyed[K], V any](key K, val V, left, right *node[K, V]) *node[K, V] {
	return &node[K, V]{key: key, val: val, left: left, right: right, height: 1 + max(height(left), height(right))}
}

// balance makes a node over two subtrees whose heights differ by at most
// two, rotating when they differ by two.
func balance[K keyed[K], V any](key K, val V, left, right *node[K, V]) *node[K, V] {
	hl, hr := height(left), height(right)
	switch {
	case hl > hr+1:
		if height(left.left) >= height(left.right) {
			return mk(left.key, left.val, left.left, mk(key, val, left.right, right))
		}
		lr := left.right
		return mk(lr.key, lr.val, mk(left.key, left.val, left.left, lr.left), mk(key, val, lr.right, right))
	case hr > hl+1:
		if height(right.right) >= height(right.left) {
			return mk(right.key, right.val, mk(key, val, left, right.left), right.right)
		}
		rl := right.left
		return mk(rl.key, rl.val, mk(key, val, left, rl.left), mk(right.key, right.val, rl.right, right.right))
	}
	return mk(key, val, left, right)
}

func insert[K keyed[K], V any](n *node[K, V], key K, val V) (*node[K, V], bool) {
	if n == nil {
		return mk[K, V](key, val, nil, nil), true
	}
	c := key.Compare(n.key)
	switch {
	case c < 0:
		l, added := insert(n.left, key, val)
		return balance(n.key, n.val, l, n.right), added
	case c > 0:
		r, added := insert(n.right, key, val)
		return balance(n.key, n.val, n.left, r), added
	}
	return &node[K, V]{key: key, val: val, left: n.left, right: n.right, height: n.height}, false
}

func remove[K keyed[K], V any](n *node[K, V], key K) (*node[K, V], bool) {
	if n == nil {
		return nil, false
	}
	c := key.Compare(n.key)
	switch {
	case c < 0:
		l, removed := remove(n.left, key)
		if !removed {
			return n, false
		}
		return balance(n.key, n.val, l, n.right), true
	case c > 0:
		r, removed := remove(n.right, key)
		if !removed {
			return n, false
		}
		return balance(n.key, n.val, n.left, r), true
	}
	switch {
	case n.left == nil:
		return n.right, true
	case n.right == nil:
		return n.left, true
	}
	k, v, r := removeMin(n.right)
	return balance(k, v, n.left, r), true
}

// removeMin returns the smallest key of a non-empty tree, its value, and the
// tree without it.
func removeMin[K keyed[K], V any](n *node[K, V]) (K, V, *node[K, V]) {
	if n.left == nil {
		return n.key, n.val, n.right
	}
	k, v, l := removeMin(n.left)
	return k, v, balance(n.key, n.val, l, n.right)
}
