package model

import "github.com/svcproxy/svcproxy/nftables/internal/nftnl"

// AddDigest adds to d (sign 1) or removes from it (sign −1) each element
// that e stands for (each row of a block), hashed as nftnl.ElementHash
// hashes the element the kernel holds once it is written: its key and
// its value or verdict in the bytes the messages of this package (and
// nft) write. e's set is not an interval set.
func (e *Element) AddDigest(d *nftnl.Digest, sign int) {
	var verdict *nftnl.Verdict
	if e.Verdict != nil {
		code, _ := nftnl.VerdictCode(e.Verdict.Kind)
		verdict = &nftnl.Verdict{Code: code, Chain: e.Verdict.Chain}
	}
	var rowBuf []Datum
	var fields []byte
	for r := range e.Len() {
		rowKey, value := e.row(r, &rowBuf)
		fields = appendFields(fields[:0], false, e.Key, rowKey)
		keyEnd := len(fields)
		var data []byte
		if len(value) > 0 {
			fields = appendFields(fields, false, value, nil)
			data = fields[keyEnd:]
		}
		d.Add(nftnl.ElementHash(fields[:keyEnd], nil, data, verdict), sign)
	}
}
