package scores

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Merge combines score files of one model into a normalized file
// (spec/scores.md, "Merging"). names label the inputs in errors (paths); nil
// labels them "input #i".
//
// Each input contributes a per-token-normalised vector:
//   - a merge result (Normalized) contributes its Scores as they are;
//   - the raw shard files "0/N" … "N-1/N" of one run (same task, same
//     dataset, same N) are first summed raw, scores and tokens, and
//     contribute ΣS/ΣT; the shard set must be complete and must not repeat
//     an index;
//   - any other raw file contributes S/T.
//
// The result's Scores are the sum of the contributions, taken in a canonical
// order with compensated summation, so any grouping and order of the same raw
// profiles gives the same result to about one rounding:
// Merge([Merge([a,b]),c]) = Merge([a,Merge([b,c])]) = Merge([c,b,a]).
//
// Merge refuses inputs whose model digests or layer shapes differ (naming
// both inputs and both values), a raw input without tokens, and a raw
// profile that appears twice (same ContentDigest, directly or inside a merge
// result). The result has Task and Dataset set where all sources share one
// (else ""), ToolVersion where all inputs share one (else ""), summed counts,
// Shard "", Normalized true and MergedFrom listing every raw source in
// canonical order (task, dataset, shard, digest).
func Merge(inputs []*File, names []string) (*File, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("scores: merge of no files")
	}
	if names != nil && len(names) != len(inputs) {
		return nil, fmt.Errorf("scores: merge of %d files with %d names", len(inputs), len(names))
	}
	label := func(i int) string {
		if names != nil {
			return names[i]
		}
		return fmt.Sprintf("input #%d", i)
	}
	for i, f := range inputs {
		if f == nil {
			return nil, fmt.Errorf("%s: nil score file", label(i))
		}
		if err := f.validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", label(i), err)
		}
	}
	ref := inputs[0]
	for i, f := range inputs[1:] {
		i++
		if f.ModelDigest != ref.ModelDigest {
			return nil, fmt.Errorf("scores: cannot merge files of different models: %s has %s %s, %s has %s %s",
				label(0), KeyModelDigest, ref.ModelDigest, label(i), KeyModelDigest, f.ModelDigest)
		}
		if f.Layers() != ref.Layers() {
			return nil, fmt.Errorf("scores: cannot merge: %s has %s %d, %s has %s %d",
				label(0), KeyLayers, ref.Layers(), label(i), KeyLayers, f.Layers())
		}
		if f.IntermediateSize() != ref.IntermediateSize() {
			return nil, fmt.Errorf("scores: cannot merge: %s has %s %d, %s has %s %d",
				label(0), KeyIntermediateSize, ref.IntermediateSize(), label(i), KeyIntermediateSize, f.IntermediateSize())
		}
	}

	// The raw sources of every input, checked for repeats.
	sources := make([][]Source, len(inputs))
	owner := map[string]int{}
	for i, f := range inputs {
		if f.Normalized {
			sources[i] = f.MergedFrom
		} else {
			if f.Tokens() == 0 {
				return nil, fmt.Errorf("%s: raw profile with 0 tokens (%s and %s are 0): cannot normalise", label(i), KeyInputTokens, KeyGeneratedTokens)
			}
			sources[i] = []Source{f.Source()}
		}
		for _, s := range sources[i] {
			if j, dup := owner[s.Digest]; dup {
				what := "the same raw profile"
				if s.Shard != "" {
					what += " (shard " + s.Shard + ")"
				}
				return nil, fmt.Errorf("scores: %s and %s both contain %s (task %q, dataset %q, digest %s): it would be counted twice",
					label(j), label(i), what, s.Task, s.Dataset, s.Digest)
			}
			owner[s.Digest] = i
		}
	}

	// Group the inputs into contributions.
	type shardRun struct {
		task, dataset string
		n             int
	}
	type contribution struct {
		key     string
		members []int // indexes of inputs; raw shards ordered by shard index
		tokens  int64 // total tokens of raw members; 0 for a merge result
	}
	var contribs []*contribution
	runs := map[shardRun]*contribution{}
	runShard := map[int]int{} // input → shard index
	for i, f := range inputs {
		switch {
		case f.Normalized:
			contribs = append(contribs, &contribution{members: []int{i}})
		case f.Shard != "":
			si, sn, _ := ParseShard(f.Shard)
			k := shardRun{f.Task, f.Dataset, sn}
			c := runs[k]
			if c == nil {
				c = &contribution{}
				runs[k] = c
				contribs = append(contribs, c)
			}
			for _, j := range c.members {
				if runShard[j] == si {
					return nil, fmt.Errorf("scores: %s and %s are both shard %s of task %q dataset %q",
						label(j), label(i), f.Shard, f.Task, f.Dataset)
				}
			}
			runShard[i] = si
			c.members = append(c.members, i)
			c.tokens += f.Tokens()
		default:
			contribs = append(contribs, &contribution{members: []int{i}, tokens: f.Tokens()})
		}
	}
	for k, c := range runs {
		if len(c.members) != k.n {
			slices.SortFunc(c.members, func(a, b int) int { return runShard[a] - runShard[b] })
			var have, missing []string
			present := map[int]bool{}
			for _, j := range c.members {
				have = append(have, label(j))
				present[runShard[j]] = true
			}
			for s := range k.n {
				if !present[s] {
					missing = append(missing, FormatShard(s, k.n))
				}
			}
			return nil, fmt.Errorf("scores: task %q dataset %q: incomplete shard set, have %s, missing shard %s: the shards of a run must be merged together",
				k.task, k.dataset, strings.Join(have, ", "), strings.Join(missing, ", "))
		}
		slices.SortFunc(c.members, func(a, b int) int { return runShard[a] - runShard[b] })
	}
	for _, c := range contribs {
		var ds []string
		for _, j := range c.members {
			for _, s := range sources[j] {
				ds = append(ds, s.Digest)
			}
		}
		slices.Sort(ds)
		c.key = strings.Join(ds, ",")
	}
	slices.SortFunc(contribs, func(a, b *contribution) int { return strings.Compare(a.key, b.key) })

	// Sum per layer, neuron by neuron, with Neumaier's compensated sum.
	layers, n := ref.Layers(), ref.IntermediateSize()
	out := make([][]float64, layers)
	sum := make([]float64, n)
	comp := make([]float64, n)
	vec := make([]float64, n)
	vcomp := make([]float64, n)
	for l := range layers {
		clear(sum)
		clear(comp)
		for _, c := range contribs {
			first := inputs[c.members[0]]
			if first.Normalized {
				copy(vec, first.Scores[l])
			} else {
				clear(vec)
				clear(vcomp)
				for _, j := range c.members {
					for k, v := range inputs[j].Scores[l] {
						vec[k], vcomp[k] = neumaier(vec[k], vcomp[k], v)
					}
				}
				t := float64(c.tokens)
				for k := range vec {
					vec[k] = (vec[k] + vcomp[k]) / t
				}
			}
			for k, v := range vec {
				sum[k], comp[k] = neumaier(sum[k], comp[k], v)
			}
		}
		row := make([]float64, n)
		for k := range row {
			row[k] = sum[k] + comp[k]
		}
		out[l] = row
	}

	// Metadata.
	m := &File{
		ModelDigest: ref.ModelDigest,
		ToolVersion: ref.ToolVersion,
		Normalized:  true,
		Scores:      out,
	}
	for _, f := range inputs {
		if f.ToolVersion != m.ToolVersion {
			m.ToolVersion = ""
		}
	}
	var prompts int64
	for _, ss := range sources {
		m.MergedFrom = append(m.MergedFrom, ss...)
	}
	slices.SortFunc(m.MergedFrom, compareSources)
	m.Task, m.Dataset = m.MergedFrom[0].Task, m.MergedFrom[0].Dataset
	for _, s := range m.MergedFrom {
		if s.Task != m.Task {
			m.Task = ""
		}
		if s.Dataset != m.Dataset {
			m.Dataset = ""
		}
		prompts += int64(s.Prompts)
		if s.InputTokens > math.MaxInt64-m.InputTokens || s.GeneratedTokens > math.MaxInt64-m.GeneratedTokens {
			return nil, fmt.Errorf("scores: merge: token counts overflow")
		}
		m.InputTokens += s.InputTokens
		m.GeneratedTokens += s.GeneratedTokens
	}
	if m.InputTokens > math.MaxInt64-m.GeneratedTokens {
		return nil, fmt.Errorf("scores: merge: token counts overflow")
	}
	if prompts > math.MaxInt32 {
		return nil, fmt.Errorf("scores: merge: prompt count %d overflows", prompts)
	}
	m.Prompts = int(prompts)
	return m, nil
}

// neumaier adds x to the compensated sum (s, c) and returns the new pair; the
// sum's value is s + c.
func neumaier(s, c, x float64) (float64, float64) {
	t := s + x
	if math.Abs(s) >= math.Abs(x) {
		c += (s - t) + x
	} else {
		c += (x - t) + s
	}
	return t, c
}
