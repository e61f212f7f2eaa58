package metrics

import (
	"math"
	"strings"
)

// Score is one ROUGE score: precision, recall and F-measure, each in 0..1.
type Score struct {
	P, R, F float64
}

// RougeScores holds ROUGE-1, ROUGE-2 and ROUGE-L ("rougeL": the longest
// common subsequence over the whole text, not the summary-level "rougeLsum").
type RougeScores struct {
	R1, R2, RL Score
}

// RougeTokenize is the tokenizer of Google's rouge-score package
// (rouge_score/tokenize.py) without stemming: lower-case, replace every run
// of characters outside [a-z0-9] by a space, and split on whitespace. Letters
// outside ASCII (accented letters, other scripts) are therefore dropped.
//
// rouge-score can also Porter-stem tokens longer than 3 characters
// (use_stemmer=True, NLTK's PorterStemmer); that is not implemented here, so
// scores equal rouge_scorer.RougeScorer(..., use_stemmer=False).
func RougeTokenize(s string) []string {
	s = pyLower(s)
	return strings.FieldsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
}

// fmeasure is rouge-score's scoring.fmeasure: the harmonic mean, 0 when both
// are 0.
func fmeasure(p, r float64) float64 {
	if p+r > 0 {
		return 2 * p * r / (p + r)
	}
	return 0
}

// ngramOverlap scores n-gram overlap as rouge-score's _score_ngrams: the
// clipped intersection count over max(count, 1) of the prediction n-grams
// (precision) and of the reference n-grams (recall).
func ngramOverlap(ref, pred []string, n int) Score {
	count := func(toks []string) (map[string]int, int) {
		m := make(map[string]int)
		total := 0
		for i := 0; i+n <= len(toks); i++ {
			m[strings.Join(toks[i:i+n], " ")]++
			total++
		}
		return m, total
	}
	rm, rTotal := count(ref)
	pm, pTotal := count(pred)
	inter := 0
	for g, c := range rm {
		inter += min(c, pm[g])
	}
	p := float64(inter) / float64(max(pTotal, 1))
	r := float64(inter) / float64(max(rTotal, 1))
	return Score{P: p, R: r, F: fmeasure(p, r)}
}

// lcsLen is the length of the longest common subsequence of a and b
// (dynamic programming, two rows).
func lcsLen(a, b []string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			if a[i-1] == b[j-1] {
				cur[j] = prev[j-1] + 1
			} else {
				cur[j] = max(prev[j], cur[j-1])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// lcsScore is rouge-score's _score_lcs: all zero when either text has no
// tokens, else P = LCS/|pred|, R = LCS/|ref|.
func lcsScore(ref, pred []string) Score {
	if len(ref) == 0 || len(pred) == 0 {
		return Score{}
	}
	l := float64(lcsLen(ref, pred))
	p := l / float64(len(pred))
	r := l / float64(len(ref))
	return Score{P: p, R: r, F: fmeasure(p, r)}
}

// Rouge scores the prediction pred against the reference ref as
// rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"],
// use_stemmer=False).score(ref, pred): both are tokenized by RougeTokenize;
// ROUGE-N precision = overlapping n-grams / prediction n-grams, recall =
// overlapping n-grams / reference n-grams (counts clipped); ROUGE-L
// precision = LCS / prediction tokens, recall = LCS / reference tokens; F is
// the harmonic mean of P and R (0 when both are 0).
func Rouge(pred, ref string) RougeScores {
	rt := RougeTokenize(ref)
	pt := RougeTokenize(pred)
	return RougeScores{
		R1: ngramOverlap(rt, pt, 1),
		R2: ngramOverlap(rt, pt, 2),
		RL: lcsScore(rt, pt),
	}
}

// RougeMax scores pred against several references as rouge-score's
// score_multi: for each ROUGE type separately, the score against the
// reference with the highest F-measure (the first one on ties). With no
// reference it returns all zeros.
func RougeMax(pred string, refs []string) RougeScores {
	var best RougeScores
	for i, ref := range refs {
		s := Rouge(pred, ref)
		if i == 0 || s.R1.F > best.R1.F {
			best.R1 = s.R1
		}
		if i == 0 || s.R2.F > best.R2.F {
			best.R2 = s.R2
		}
		if i == 0 || s.RL.F > best.RL.F {
			best.RL = s.RL
		}
	}
	return best
}

// RougeCorpus is the corpus ROUGE of preds against refs (refs[i] is the
// reference of preds[i]): the mean over examples of each per-example
// precision, recall and F-measure (the reported corpus score is the mean F).
// It returns all zeros for an empty corpus and panics when the lengths
// differ.
func RougeCorpus(preds, refs []string) RougeScores {
	if len(preds) != len(refs) {
		panic("metrics.RougeCorpus: predictions and references differ in number")
	}
	var sum RougeScores
	for i := range preds {
		s := Rouge(preds[i], refs[i])
		sum.R1 = addScore(sum.R1, s.R1)
		sum.R2 = addScore(sum.R2, s.R2)
		sum.RL = addScore(sum.RL, s.RL)
	}
	if len(preds) == 0 {
		return sum
	}
	k := 1 / float64(len(preds))
	return RougeScores{R1: scaleScore(sum.R1, k), R2: scaleScore(sum.R2, k), RL: scaleScore(sum.RL, k)}
}

func addScore(a, b Score) Score { return Score{a.P + b.P, a.R + b.R, a.F + b.F} }

func scaleScore(a Score, k float64) Score { return Score{a.P * k, a.R * k, a.F * k} }

// Perplexity is exp of the mean of nll, the per-token negative
// log-likelihoods in nats. It returns NaN for an empty slice.
func Perplexity(nll []float64) float64 {
	if len(nll) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, v := range nll {
		sum += v
	}
	return math.Exp(sum / float64(len(nll)))
}
