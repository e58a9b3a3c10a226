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

// rowWidths are the data of a row's part of the key and of the value of
// block e.
func (e *Element) rowWidths() (key, value int) {
	if e.Source != nil {
		return e.Source.Widths()
	}
	return len(e.RowKeys) / e.Rows, len(e.Value) / e.Rows
}

// row is row i of e: the row's own part of the key (after e.Key) and its
// value. For an element that is not a block, row 0 is the element's key
// (after e.Key: none) and value. The row of a block with a Source is made
// in buf, and holds until buf is next used.
func (e *Element) row(i int, buf *[]Datum) (key, value []Datum) {
	switch {
	case e.Rows == 0:
		return nil, e.Value
	case e.Source != nil:
		kw, _ := e.Source.Widths()
		*buf = e.Source.AppendRow((*buf)[:0], i)
		return (*buf)[:kw:kw], (*buf)[kw:]
	}
	kw, vw := e.rowWidths()
	if vw == 0 {
		return e.RowKeys[i*kw : (i+1)*kw], nil
	}
	return e.RowKeys[i*kw : (i+1)*kw], e.Value[i*vw : (i+1)*vw]
}

// rows is rows [from, to) of block e, as a block.
func (e *Element) rows(from, to int) Element {
	b := *e
	b.Rows = to - from
	if e.Source != nil {
		b.Source = rowsFrom(e.Source, from)
		return b
	}
	kw, vw := e.rowWidths()
	b.RowKeys = e.RowKeys[from*kw : to*kw : to*kw]
	b.Value = e.Value[from*vw : to*vw : to*vw]
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
		kw, vw := e.rowWidths()
		if e.Source == nil {
			vw = 0 // the values are e.Value's
		}
		data := make([]Datum, 0, e.Rows*(len(e.Key)+kw+vw))
		var buf []Datum
		for r := range e.Rows {
			rowKey, value := e.row(r, &buf)
			data = append(append(data, e.Key...), rowKey...)
			key := data[len(data)-len(e.Key)-kw:]
			if e.Source != nil && vw > 0 {
				data = append(data, value...)
				value = data[len(data)-vw:]
			}
			out = append(out, Element{Set: e.Set, Key: key[:len(key):len(key)], Value: value, Comment: e.Comment})
		}
	}
	return out
}
