package metrics

import (
	"fmt"
	"math"
	"regexp"
	"strings"
)

// maxOrder is BLEU's maximum n-gram order.
const maxOrder = 4

// The regular expressions of the mteval-v13a tokenizer (the "language
// dependent part" of mteval-v13a.pl's tokenization, as sacreBLEU's 13a
// tokenizer applies them), in order.
var (
	// Split off every ASCII symbol in { | } ~ [ \ ] ^ _ ` space ! " # $ % &
	// ( ) * + : ; < = > ? @ /. Not the apostrophe, the hyphen, the period or
	// the comma, which the next rules handle.
	re13aSymbols = regexp.MustCompile(`([\x7b-\x7e\x5b-\x60\x20-\x26\x28-\x2b\x3a-\x40\x2f])`)
	// Split a period or comma that is not preceded by a digit.
	re13aPunctBefore = regexp.MustCompile(`([^0-9])([.,])`)
	// Split a period or comma that is not followed by a digit.
	re13aPunctAfter = regexp.MustCompile(`([.,])([^0-9])`)
	// Split a dash that is preceded by a digit.
	re13aDash = regexp.MustCompile(`([0-9])(-)`)
)

// Tokenize13a tokenizes one segment as sacreBLEU's default "13a" tokenizer
// (equivalent to mteval-v13a.pl, used by WMT) and returns the tokens joined
// by single spaces:
//
//  1. remove "<skipped>", join lines broken at "-\n", turn "\n" into " ",
//     and unescape &quot; &amp; &lt; &gt; (in that order);
//  2. pad with a space on each side and apply, in order:
//     ASCII symbols other than ' - . , → " sym ";
//     "X." / "X," with X not a digit → "X . " / "X , ";
//     ".X" / ",X" with X not a digit → " . X" / " , X";
//     "9-" (a dash after a digit) → "9 - ";
//  3. collapse whitespace.
//
// So "don't" and "well-known" stay whole, "3.14" and "1,000" stay whole,
// while "1990-2000" becomes "1990 - 2000". Each regular expression replaces
// non-overlapping leftmost matches, as Python's re.sub does. sacreBLEU also
// strips trailing whitespace before tokenizing; so does this function.
func Tokenize13a(line string) string {
	line = pyRstrip(line)
	line = strings.ReplaceAll(line, "<skipped>", "")
	line = strings.ReplaceAll(line, "-\n", "")
	line = strings.ReplaceAll(line, "\n", " ")
	line = strings.ReplaceAll(line, "&quot;", `"`)
	line = strings.ReplaceAll(line, "&amp;", "&")
	line = strings.ReplaceAll(line, "&lt;", "<")
	line = strings.ReplaceAll(line, "&gt;", ">")
	line = " " + line + " "
	line = re13aSymbols.ReplaceAllString(line, " ${1} ")
	line = re13aPunctBefore.ReplaceAllString(line, "${1} ${2} ")
	line = re13aPunctAfter.ReplaceAllString(line, " ${1} ${2}")
	line = re13aDash.ReplaceAllString(line, "${1} ${2} ")
	return strings.Join(pyFields(line), " ")
}

// BLEUResult is a corpus BLEU score with its sufficient statistics, as
// sacreBLEU reports them.
type BLEUResult struct {
	// Score is BLEU in 0..100.
	Score float64
	// Precisions are the (smoothed) n-gram precisions for n = 1..4, in
	// percent (0..100).
	Precisions [4]float64
	// Counts are the clipped n-gram matches and Totals the hypothesis n-gram
	// counts, for n = 1..4, summed over the corpus.
	Counts, Totals [4]int
	// BP is the brevity penalty.
	BP float64
	// SysLen is the total hypothesis length in tokens, RefLen the total
	// effective reference length (the closest reference length per segment).
	SysLen, RefLen int
}

// String formats r as sacreBLEU's verbose score line (without signature).
func (r BLEUResult) String() string {
	ratio := 0.0
	if r.RefLen > 0 {
		ratio = float64(r.SysLen) / float64(r.RefLen)
	}
	return fmt.Sprintf("BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %d ref_len = %d)",
		r.Score, r.Precisions[0], r.Precisions[1], r.Precisions[2], r.Precisions[3],
		r.BP, ratio, r.SysLen, r.RefLen)
}

// ngramCounts counts the n-grams of tokens for n = 1..4, one map per order
// (the key is the n tokens joined by spaces; tokens contain no spaces).
func ngramCounts(tokens []string) [maxOrder]map[string]int {
	var c [maxOrder]map[string]int
	for n := 1; n <= maxOrder; n++ {
		m := make(map[string]int)
		for i := 0; i+n <= len(tokens); i++ {
			m[strings.Join(tokens[i:i+n], " ")]++
		}
		c[n-1] = m
	}
	return c
}

// closestRefLen is the reference length closest to hypLen; ties go to the
// shorter reference (sacreBLEU's _get_closest_ref_len).
func closestRefLen(hypLen int, refLens []int) int {
	bestDiff, best := -1, -1
	for _, l := range refLens {
		d := hypLen - l
		if d < 0 {
			d = -d
		}
		if bestDiff == -1 || d < bestDiff {
			bestDiff, best = d, l
		} else if d == bestDiff && l < best {
			best = l
		}
	}
	return best
}

// CorpusBLEU computes corpus-level BLEU of hyps against refs as sacreBLEU's
// corpus_bleu does with its defaults (tokenize="13a", case-sensitive,
// smooth_method="exp", no effective order, max n-gram order 4).
//
// refs[i] holds the references of hyps[i] (one or more; note that sacreBLEU's
// own API is transposed: one stream per reference). Empty reference strings
// are ignored, as sacreBLEU ignores them to allow a variable number of
// references; a hypothesis left with no reference (sacreBLEU raises an error
// there) counts with an effective reference length of 0 and no matches.
// CorpusBLEU panics when len(refs) != len(hyps).
//
// Per segment, after 13a tokenisation: the reference n-gram counts are the
// maximum over the references, the hypothesis n-gram count is clipped to it,
// and the effective reference length is the closest reference length (ties
// to the shorter). Summed over the corpus these give matches m_n, totals t_n,
// hypothesis length c and reference length r. Then
//
//	BP  = 1 if c >= r, exp(1 - r/c) if 0 < c < r, 0 if c = 0
//	p_n = 100 m_n / t_n, and where m_n = 0: 100 / (2^k t_n) for the k-th
//	      such order ("exp" smoothing, as mteval-v13a's NIST smoothing)
//	BLEU = BP · exp(mean over n = 1..4 of ln p_n)
//
// BLEU is 0 when nothing matches at all, and when some t_n is 0 (fewer than
// n tokens in every hypothesis), as in sacreBLEU.
func CorpusBLEU(hyps []string, refs [][]string) BLEUResult {
	if len(hyps) != len(refs) {
		panic(fmt.Sprintf("metrics.CorpusBLEU: %d hypotheses but %d reference lists", len(hyps), len(refs)))
	}
	var res BLEUResult
	for i, hyp := range hyps {
		var refLens []int
		var refMax [maxOrder]map[string]int
		for n := range refMax {
			refMax[n] = make(map[string]int)
		}
		for _, ref := range refs[i] {
			if ref == "" {
				continue
			}
			toks := strings.Split(Tokenize13a(ref), " ")
			if toks[0] == "" {
				toks = nil
			}
			refLens = append(refLens, len(toks))
			for n, m := range ngramCounts(toks) {
				for g, c := range m {
					if c > refMax[n][g] {
						refMax[n][g] = c
					}
				}
			}
		}
		htoks := strings.Split(Tokenize13a(hyp), " ")
		if htoks[0] == "" {
			htoks = nil
		}
		res.SysLen += len(htoks)
		if len(refLens) > 0 {
			res.RefLen += closestRefLen(len(htoks), refLens)
		}
		for n, m := range ngramCounts(htoks) {
			for g, c := range m {
				res.Totals[n] += c
				res.Counts[n] += min(c, refMax[n][g])
			}
		}
	}
	res.BP, res.Precisions, res.Score = bleuFromStats(res.Counts, res.Totals, res.SysLen, res.RefLen)
	return res
}

// bleuFromStats is sacreBLEU's compute_bleu with smooth_method="exp" and
// effective_order=False.
func bleuFromStats(counts, totals [maxOrder]int, sysLen, refLen int) (bp float64, prec [maxOrder]float64, score float64) {
	bp = 1
	if sysLen < refLen {
		if sysLen > 0 {
			bp = math.Exp(1 - float64(refLen)/float64(sysLen))
		} else {
			bp = 0
		}
	}
	anyMatch := false
	for _, c := range counts {
		if c > 0 {
			anyMatch = true
		}
	}
	if !anyMatch {
		return bp, prec, 0
	}
	smooth := 1.0
	for n := 0; n < maxOrder; n++ {
		if totals[n] == 0 {
			// This and the higher precisions stay 0, so BLEU is 0.
			return bp, prec, 0
		}
		if counts[n] == 0 {
			smooth *= 2
			prec[n] = 100 / (smooth * float64(totals[n]))
		} else {
			prec[n] = 100 * float64(counts[n]) / float64(totals[n])
		}
	}
	logSum := 0.0
	for _, p := range prec {
		logSum += math.Log(p)
	}
	return bp, prec, bp * math.Exp(logSum/maxOrder)
}
