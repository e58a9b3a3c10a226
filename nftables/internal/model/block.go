package model

import "slices"

// Len is the number of elements e stands for: its Rows when it is a
// block, else 1.
func (e *Element) Len() int { return max(e.Rows, 1) }

// Count is the number of elements es stand for.
func Count(es []Element) int {
	n := 0
	for i := range es {
		n += es[i].Len()
	}
	return n
}

// row is row i of e: the row's own part of the key (after e.Key) and its
// value. For an element that is not a block, row 0 is the element's key
// (after e.Key: none) and value. A block's row is made in buf, and holds
// until buf is next used.
func (e *Element) row(i int, buf *[]Datum) (key, value []Datum) {
	if e.Rows == 0 {
		return nil, e.Value
	}
	kw, vw := e.Source.Widths()
	*buf = e.Source.AppendRow((*buf)[:0], i)
	if vw == 0 {
		return (*buf)[:kw:kw], nil
	}
	return (*buf)[:kw:kw], (*buf)[kw:]
}

// rowComment is row i's comment: that of e's Source when it has
// RowComments, else e's Comment.
func (e *Element) rowComment(i int) string {
	if c, from, ok := e.rowComments(); ok {
		return c.RowComment(from + i)
	}
	return e.Comment
}

// maxCommentLen bounds the length of the comment of each of e's rows.
func (e *Element) maxCommentLen() int {
	if c, _, ok := e.rowComments(); ok {
		return c.MaxCommentLen()
	}
	return len(e.Comment)
}

// rowComments is the RowComments of block e's rows, if its Source has
// them: row i of e is the RowComments' row from+i.
func (e *Element) rowComments() (c RowComments, from int, ok bool) {
	if e.Rows == 0 {
		return nil, 0, false
	}
	src := e.Source
	if o, isOffset := src.(offsetRows); isOffset {
		src, from = o.RowSource, o.from
	}
	c, ok = src.(RowComments)
	return c, from, ok
}

// rows is rows [from, to) of block e, as a block.
func (e *Element) rows(from, to int) Element {
	b := *e
	b.Rows = to - from
	b.Source = rowsFrom(e.Source, from)
	return b
}

// offsetRows are the rows of a RowSource from its row from on.
type offsetRows struct {
	RowSource
	from int
}

func (o offsetRows) AppendRow(dst []Datum, i int) []Datum {
	return o.RowSource.AppendRow(dst, o.from+i)
}

// rowsFrom is src's rows from row from on.
func rowsFrom(src RowSource, from int) RowSource {
	if o, ok := src.(offsetRows); ok {
		return offsetRows{o.RowSource, o.from + from}
	}
	return offsetRows{src, from}
}

// Expand returns es with every block replaced by its rows, each an element
// of its own, in order; es itself when it holds no block.
func Expand(es []Element) []Element {
	if !slices.ContainsFunc(es, func(e Element) bool { return e.Rows > 0 }) {
		return es
	}
	out := make([]Element, 0, Count(es))
	for i := range es {
		e := &es[i]
		if e.Rows == 0 {
			out = append(out, *e)
			continue
		}
		kw, vw := e.Source.Widths()
		data := make([]Datum, 0, e.Rows*(len(e.Key)+kw+vw))
		var buf []Datum
		for r := range e.Rows {
			rowKey, value := e.row(r, &buf)
			data = append(append(data, e.Key...), rowKey...)
			key := data[len(data)-len(e.Key)-kw:]
			if vw > 0 {
				data = append(data, value...)
				value = data[len(data)-vw:]
			}
			out = append(out, Element{Set: e.Set, Key: key[:len(key):len(key)], Value: value, Comment: e.rowComment(r)})
		}
	}
	return out
}
