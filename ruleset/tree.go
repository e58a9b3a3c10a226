package ruleset

// keyed is a key type ordered by its Compare method.
type keyed[K any] interface{ Compare(K) int }

// entry is a value that carries its own key, so that a node need not hold a
// copy of it.
type entry[K any] interface{ key() K }

// tree is a persistent (immutable) AVL tree of entries ordered by key: with
// and without return a new tree that shares every node but the O(log n)
// ones on the path to the key, so that a Ruleset made from another by
// Update costs time and memory proportional to the change, and both stay
// valid. The zero tree is empty.
type tree[K keyed[K], V entry[K]] struct {
	root *node[K, V]
	len  int
}

type node[K keyed[K], V entry[K]] struct {
	val         V
	left, right *node[K, V]
	height      int8
}

// treeFromSorted builds a balanced tree of vals, whose keys are in
// increasing order, each once: O(n).
func treeFromSorted[K keyed[K], V entry[K]](vals []V) tree[K, V] {
	// One allocation for all nodes: a Build makes many.
	nodes := make([]node[K, V], len(vals))
	var build func(lo, hi int) *node[K, V]
	build = func(lo, hi int) *node[K, V] {
		if lo >= hi {
			return nil
		}
		mid := int(uint(lo+hi) >> 1)
		nd := &nodes[mid]
		nd.val = vals[mid]
		nd.left, nd.right = build(lo, mid), build(mid+1, hi)
		nd.height = 1 + max(height(nd.left), height(nd.right))
		return nd
	}
	return tree[K, V]{root: build(0, len(vals)), len: len(vals)}
}

// get returns the entry with key.
func (t tree[K, V]) get(key K) (V, bool) {
	n := t.root
	for n != nil {
		c := key.Compare(n.val.key())
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

// with returns a tree that holds val in place of any entry with its key.
func (t tree[K, V]) with(val V) tree[K, V] {
	root, added := insert(t.root, val.key(), val)
	if added {
		t.len++
	}
	t.root = root
	return t
}

// without returns a tree without the entry with key.
func (t tree[K, V]) without(key K) tree[K, V] {
	root, removed := remove(t.root, key)
	if removed {
		t.root = root
		t.len--
	}
	return t
}

// all calls yield with every entry in increasing key order until yield
// returns false.
func (t tree[K, V]) all(yield func(V) bool) {
	walk(t.root, yield)
}

func walk[K keyed[K], V entry[K]](n *node[K, V], yield func(V) bool) bool {
	for n != nil {
		if !walk(n.left, yield) || !yield(n.val) {
			return false
		}
		n = n.right
	}
	return true
}

func height[K keyed[K], V entry[K]](n *node[K, V]) int8 {
	if n == nil {
		return 0
	}
	return n.height
}

// newNode makes a node over two subtrees whose heights differ by at most one.
func newNode[K keyed[K], V entry[K]](val V, left, right *node[K, V]) *node[K, V] {
	return &node[K, V]{val: val, left: left, right: right, height: 1 + max(height(left), height(right))}
}

// balance makes a node over two subtrees whose heights differ by at most
// two, rotating when they differ by two.
func balance[K keyed[K], V entry[K]](val V, left, right *node[K, V]) *node[K, V] {
	hl, hr := height(left), height(right)
	switch {
	case hl > hr+1:
		if height(left.left) >= height(left.right) {
			return newNode(left.val, left.left, newNode(val, left.right, right))
		}
		lr := left.right
		return newNode(lr.val, newNode(left.val, left.left, lr.left), newNode(val, lr.right, right))
	case hr > hl+1:
		if height(right.right) >= height(right.left) {
			return newNode(right.val, newNode(val, left, right.left), right.right)
		}
		rl := right.left
		return newNode(rl.val, newNode(val, left, rl.left), newNode(right.val, rl.right, right.right))
	}
	return newNode(val, left, right)
}

func insert[K keyed[K], V entry[K]](n *node[K, V], key K, val V) (*node[K, V], bool) {
	if n == nil {
		return newNode[K, V](val, nil, nil), true
	}
	c := key.Compare(n.val.key())
	switch {
	case c < 0:
		l, added := insert(n.left, key, val)
		return balance(n.val, l, n.right), added
	case c > 0:
		r, added := insert(n.right, key, val)
		return balance(n.val, n.left, r), added
	}
	return &node[K, V]{val: val, left: n.left, right: n.right, height: n.height}, false
}

func remove[K keyed[K], V entry[K]](n *node[K, V], key K) (*node[K, V], bool) {
	if n == nil {
		return nil, false
	}
	c := key.Compare(n.val.key())
	switch {
	case c < 0:
		l, removed := remove(n.left, key)
		if !removed {
			return n, false
		}
		return balance(n.val, l, n.right), true
	case c > 0:
		r, removed := remove(n.right, key)
		if !removed {
			return n, false
		}
		return balance(n.val, n.left, r), true
	}
	switch {
	case n.left == nil:
		return n.right, true
	case n.right == nil:
		return n.left, true
	}
	v, r := removeMin(n.right)
	return balance(v, n.left, r), true
}

// removeMin returns the smallest entry of a non-empty tree and the tree
// without it.
func removeMin[K keyed[K], V entry[K]](n *node[K, V]) (V, *node[K, V]) {
	if n.left == nil {
		return n.val, n.right
	}
	v, l := removeMin(n.left)
	return v, balance(n.val, l, n.right)
}
