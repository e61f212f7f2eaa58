package synth

import "github.com/selectinfer/sinf/runtime"

// DecodeBytes is the weight traffic of one decode step, by part.
type DecodeBytes struct {
	Attention int64 // q, k, v and o projections of every layer
	FFN       int64 // the FFN rows computed
	LMHead    int64 // the LM head (the embedding matrix when tied)
}

// Total returns the bytes read per decoded token.
func (d DecodeBytes) Total() int64 { return d.Attention + d.FFN + d.LMHead }

// Plan is what decode computes per layer: a Session's Active and PerToken.
type Plan interface {
	Active(layer int) []int32 // rows fixed at prefill (nil: every stored row)
	PerToken(layer int) int   // > 0: rows picked per token from every stored gate row (GateFirst)
}

// BytesPerToken returns the weight bytes one decode step of m reads when
// every matrix is read once per token: the attention projections, the LM
// head, and in each FFN layer the rows computed — a layer whose active set is
// nil computes every stored neuron (3·kept·hidden·s bytes: gate and up rows
// and the down_proj, whole or transposed), one with an active set
// len(active) neurons (len(active)·3·hidden·s), one picking k rows per token
// every gate row, the layer's up_proj sketch when it stores one, and k up and
// down rows ((kept + 2k)·hidden·s + the sketch's bytes). plan is the
// session (Session.Active, Session.PerToken); nil means every layer computes
// all it stores, and so does a plan whose Oracle() is true (runtime.Oracle,
// which computes every stored row). The embedding row, norms, biases and the KV cache are left
// out (negligible).
func BytesPerToken(m *runtime.Model, plan Plan) DecodeBytes {
	var d DecodeBytes
	d.LMHead = int64(m.LMHead.Bytes())
	for i := range m.Layers {
		l := &m.Layers[i]
		d.Attention += int64(l.Q.Bytes() + l.K.Bytes() + l.V.Bytes() + l.O.Bytes())
		f := &l.MLP
		var rows []int32
		k := 0
		if plan != nil {
			rows, k = plan.Active(i), plan.PerToken(i)
		}
		if o, ok := plan.(interface{ Oracle() bool }); ok && o.Oracle() {
			rows, k = nil, 0 // the oracle reads every stored row (a bound)
		}
		if rows == nil && k == 0 {
			d.FFN += int64(f.Gate.Bytes() + f.Up.Bytes() + f.Down.Bytes() + f.DownT.Bytes())
			continue
		}
		// One neuron: a gate row, an up row, and a down_proj column (a row of
		// the transposed down_proj).
		down := f.DownT.RowBytes()
		if !f.Sliced {
			down = f.Down.Rows * f.Down.DType.Size()
		}
		if k > 0 {
			d.FFN += int64(f.Gate.Bytes() + f.UpSketch.Bytes() + k*(f.Up.RowBytes()+down))
			continue
		}
		d.FFN += int64(len(rows) * (f.Gate.RowBytes() + f.Up.RowBytes() + down))
	}
	return d
}
