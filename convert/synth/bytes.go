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

// BytesPerToken returns the weight bytes one decode step of m reads when
// every matrix is read once per token: the attention projections, the LM
// head, and in each FFN layer the rows computed — a layer whose active set is
// nil computes every stored neuron (3·kept·hidden·s bytes: gate and up rows
// and the down_proj, whole or transposed), otherwise len(active) neurons
// (len(active)·3·hidden·s). active(i) is the session's active set of layer i
// (Session.Active); nil active means every layer computes all it stores. The
// embedding row, norms, biases and the KV cache are left out (negligible).
func BytesPerToken(m *runtime.Model, active func(layer int) []int32) DecodeBytes {
	var d DecodeBytes
	d.LMHead = int64(m.LMHead.Bytes())
	for i := range m.Layers {
		l := &m.Layers[i]
		d.Attention += int64(l.Q.Bytes() + l.K.Bytes() + l.V.Bytes() + l.O.Bytes())
		f := &l.MLP
		var rows []int32
		if active != nil {
			rows = active(i)
		}
		if rows == nil {
			d.FFN += int64(f.Gate.Bytes() + f.Up.Bytes() + f.Down.Bytes() + f.DownT.Bytes())
			continue
		}
		// One neuron: a gate row, an up row, and a down_proj column (a row of
		// the transposed down_proj).
		perNeuron := f.Gate.RowBytes() + f.Up.RowBytes()
		if f.Sliced {
			perNeuron += f.DownT.RowBytes()
		} else {
			perNeuron += f.Down.Rows * f.Down.DType.Size()
		}
		d.FFN += int64(len(rows) * perNeuron)
	}
	return d
}
