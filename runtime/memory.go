package runtime

import (
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// Memory is the one memory model of a run: the predicted peak resident
// memory (VmHWM) of a process that maps a .sinf file and generates with
// Session.Generate. sinf inspect prints it, convert --memory-budget chooses
// gamma by it, and sinf bench reports it beside the measured peak; a test
// checks it against the measured peak RSS of child processes on the shared
// models and a Llama-3.2-1B shape (cmd/sinf, TestMemoryModel).
//
// The parts, in bytes:
//
//   - File: the mapped file. Every page is read during a run (prefill
//     computes every loaded neuron; the LM head, or the tied embedding,
//     reads every row for each token), so all of it becomes resident.
//   - KV: the KV cache at Context positions, 2·layers·Context·kv_heads·
//     head_dim·4 (float32; ·2 for an F16 cache: WithKVCache). Only the
//     positions filled are resident, so this is the peak once the context
//     is full.
//   - Buffers: the session's other buffers (Session.ensure and
//     NewSession): RoPE tables Context·head_dim·4, prefill activations
//     Prompt·(3·hidden + 2·heads·head_dim + 2·kv_heads·head_dim +
//     2·intermediate)·4, logits vocab·4, and each kernel thread's GEMM
//     packing scratch.
//   - TokenizerLive and TokenizerPeak: the parsed tokenizer and metadata
//     on the Go heap once loaded, and the heap's peak while they are parsed
//     (the JSON decoder's garbage). Both are measured multiples of the
//     embedded tokenizer.json's bytes (compacted, as the file stores it).
//   - Heap: the Go heap's peak, max(TokenizerPeak, TokenizerLive + KV +
//     Buffers): the parse's garbage is collected and its pages reused for
//     the KV cache and buffers, so the two do not add.
//   - Process: the Go runtime, the binary's pages, the goroutine stacks and
//     the allocator's spans: a measured constant for sinf-run (the desktop
//     sinf binary starts about 8 MiB larger: its plotting library loads
//     fonts).
type Memory struct {
	Context       int   `json:"context"`
	Prompt        int   `json:"prompt_tokens"`
	Threads       int   `json:"threads"`
	File          int64 `json:"file_bytes"`
	KV            int64 `json:"kv_cache_bytes"`
	Buffers       int64 `json:"buffer_bytes"`
	TokenizerLive int64 `json:"tokenizer_bytes"`
	TokenizerPeak int64 `json:"tokenizer_parse_peak_bytes"`
	Heap          int64 `json:"heap_bytes"`
	Process       int64 `json:"process_bytes"`
	TotalBytes    int64 `json:"total_bytes"` // Total()
}

// Total is the predicted peak resident memory: File + Heap + Process.
func (m Memory) Total() int64 { return m.File + m.Heap + m.Process }

// WithKVCache returns m for a KV cache of dtype d (Model.KVCache: F32, or
// F16 at half the bytes) in place of float32's, Heap and the total with it.
func (m Memory) WithKVCache(c Config, d format.DType) Memory {
	if d == 0 {
		d = format.F32
	}
	m.KV = KVCacheBytesOf(c, m.Context, d)
	return m.settled()
}

// Measured constants of the memory model (Linux amd64, Go 1.26). With the
// Llama-3 tokenizer (../shared/tokenizers/llama3, embedded compacted in 6.08
// MB), runtime.Open of a .sinf file leaves 28.8 MiB live on the heap after a
// collection and peaks 69 MiB above the process's start. sinf-run --version
// peaks at 10.0 MiB (6.0 MiB before it linked the server, chat and template
// engine: a 15.7 MB binary against 8.6 MB); runs of the shared models, whose
// other parts are small, measured 16.09, 12.67, 15.84 and 12.54 MiB on the
// machine that first fitted this (11.25 MiB fitted them best), and 17.32,
// 13.48, 17.32 and 14.95 MiB on a 2-vCPU Zen 5 VM (a 16.2 MB binary; the
// commit before the batcher and the K-quant kernels measured 17.04, 13.07,
// 17.21, 14.66 there): 12 MiB keeps both sets within 1.5 MiB.
const (
	tokenizerLivePerByte = 5.0
	tokenizerPeakPerByte = 11.9
	processBytes         = 12 * (1 << 20)
)

// EstimateMemory predicts the peak resident memory of generating with the
// model of config c stored in a file of fileBytes bytes whose embedded
// tokenizer.json has tokenizerBytes bytes (format.Metadata.Tokenizer), with a KV cache of context
// positions, a prompt of prompt tokens (prefill runs it as one batch) and
// threads kernel threads. For a budget give prompt = context: the
// worst case, the whole context as one prompt.
func EstimateMemory(c Config, fileBytes, tokenizerBytes int64, context, prompt, threads int) Memory {
	ctx, T := int64(context), int64(max(prompt, 1))
	H, I, V := int64(c.Hidden), int64(c.Intermediate), int64(c.Vocab)
	qd, kvd, hd := int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim), int64(c.HeadDim)
	m := Memory{Context: context, Prompt: prompt, Threads: threads, File: fileBytes}
	m.KV = KVCacheBytes(c, context)
	rope := ctx * hd * 4
	acts := T * (3*H + 2*qd + 2*kvd + 2*I) * 4
	logits := V * 4
	var scratch int64
	if T > 1 { // prefill's GEMM packs panels of each thread's rows
		scratch = kernels.PackScratchBytes(threads, int(max(I, qd, H)), c.Hidden)
		// and, on block-quantized weights, quantizes x once per product
		scratch += kernels.QuantizedXBytes(int(T), int(max(I, qd, H)))
		// and runs attention in blocks of tokens, whose scores (and an
		// F16 cache's values as float32: counted for either cache) each
		// thread keeps
		scratch += kernels.AttentionScratchBytes(threads, prompt, prompt, c.HeadDim, true)
	}
	m.Buffers = rope + acts + logits + scratch
	m.TokenizerLive = int64(tokenizerLivePerByte * float64(tokenizerBytes))
	m.TokenizerPeak = int64(tokenizerPeakPerByte * float64(tokenizerBytes))
	m.Process = processBytes
	return m.settled()
}

// settled returns m with Heap and TotalBytes computed from its parts.
func (m Memory) settled() Memory {
	m.Heap = max(m.TokenizerPeak, m.TokenizerLive+m.KV+m.Buffers)
	m.TotalBytes = m.Total()
	return m
}

// KVCacheBytes is the KV cache of positions positions (NewSession):
// 2 · layers · positions · kv_heads · head_dim · 4 bytes (float32 keys and
// values; Model.KVCache F16 halves it: KVCacheBytesOf).
func KVCacheBytes(c Config, positions int) int64 {
	return KVCacheBytesOf(c, positions, format.F32)
}

// KVCacheBytesOf is KVCacheBytes for a cache of dtype d (F32 or F16).
func KVCacheBytesOf(c Config, positions int, d format.DType) int64 {
	return 2 * int64(c.Layers) * int64(positions) * int64(c.KVHeads*c.HeadDim) * int64(d.Size())
}
