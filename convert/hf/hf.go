// Package hf reads HuggingFace checkpoint folders: config.json,
// generation_config.json, and model.safetensors or a sharded
// model.safetensors.index.json. Tensor data is served zero-copy from
// read-only memory maps of the safetensors files (sthead checks the headers,
// github.com/nlpodyssey/safetensors parses them). A Checkpoint implements runtime.Source.
package hf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"unsafe"

	"github.com/nlpodyssey/safetensors"
	"golang.org/x/sys/unix"

	"github.com/selectinfer/sinf/convert/sthead"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Checkpoint is an open HF checkpoint folder.
type Checkpoint struct {
	Dir              string
	Config           runtime.Config
	ConfigJSON       []byte // config.json as stored
	GenerationConfig []byte // generation_config.json, nil when absent
	// Ignored lists the stored tensors the model does not read, each with
	// the reason (runtime.UnusedTensors); Validate fills it.
	Ignored []string
	// Unknown lists the stored tensors the architecture does not have
	// (runtime.UnusedTensors), sorted; Validate fills it. They are skipped,
	// as HF's from_pretrained skips unexpected weights, with a warning in
	// Warnings, unless Strict is set.
	Unknown []string
	// Strict makes Validate and Load refuse Unknown tensors instead.
	Strict bool
	// Warnings are sentences for the user about what was skipped (the
	// Unknown tensors); Validate fills it.
	Warnings []string

	files   []*stFile
	tensors map[string]tensorRef
	names   []string // sorted
	// index is model.safetensors.index.json's weight_map (tensor → shard
	// file name), nil for a single model.safetensors; indexPath its path.
	index     map[string]string
	indexPath string
}

type stFile struct {
	path string
	data []byte // the mapping
	st   safetensors.SafeTensors
}

type tensorRef struct {
	file *stFile
	name string
}

// Open reads dir's config.json and maps its safetensors files. Errors name the
// file and, where one is at fault, the field or tensor: an unknown model_type,
// a truncated file, an absurd header length, offsets past the end, a dtype
// this runtime does not read, an index entry naming a shard that does not
// hold the tensor (checkIndex).
func Open(dir string) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, tensors: map[string]tensorRef{}}
	cfgPath := filepath.Join(dir, "config.json")
	var err error
	if c.ConfigJSON, err = format.ReadRegularFile(cfgPath); err != nil {
		return nil, err
	}
	if c.Config, err = runtime.ParseConfig(cfgPath, c.ConfigJSON); err != nil {
		return nil, err
	}
	if g, err := format.ReadRegularFile(filepath.Join(dir, "generation_config.json")); err == nil {
		// checked here, so that convert refuses it rather than writing a
		// file that sinf-run then refuses
		if _, err := runtime.ParseGenerationConfig(filepath.Join(dir, "generation_config.json"), g); err != nil {
			return nil, err
		}
		c.GenerationConfig = g
	}
	files, err := c.weightFiles()
	if err != nil {
		return nil, err
	}
	for _, path := range files {
		if err := c.mapFile(path); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.checkIndex(); err != nil {
		c.Close()
		return nil, err
	}
	for n := range c.tensors {
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c, nil
}

// weightFiles lists the safetensors files of c.Dir: the shards named by
// model.safetensors.index.json (whose weight_map it keeps in c.index), else
// model.safetensors. A shard name that is not a file name in the folder
// (a path, "", "." or "..") is an error naming the entry.
func (c *Checkpoint) weightFiles() ([]string, error) {
	dir := c.Dir
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	raw, err := format.ReadRegularFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(single); err != nil {
			return nil, fmt.Errorf("%s: no model.safetensors or model.safetensors.index.json: %w", dir, err)
		}
		return []string{single}, nil
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: field weight_map is empty", idxPath)
	}
	seen := map[string]bool{}
	var out []string
	for _, name := range sortedKeys(idx.WeightMap) {
		f := idx.WeightMap[name]
		if f == "" || f == "." || f == ".." || f != filepath.Base(f) {
			return nil, fmt.Errorf("%s: field weight_map entry %q names shard %q, which is not a file name in the folder", idxPath, name, f)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, filepath.Join(dir, f))
		}
	}
	sort.Strings(out)
	c.index, c.indexPath = idx.WeightMap, idxPath
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkIndex checks the index against the shard headers: every tensor it
// lists is stored in the shard it names (addFile took a tensor stored in
// two shards from that one). Errors name the index, the entry and the
// shard.
func (c *Checkpoint) checkIndex() error {
	for _, name := range sortedKeys(c.index) {
		shard := c.index[name]
		ref, ok := c.tensors[name]
		switch {
		case !ok:
			return fmt.Errorf("%s: field weight_map entry %q names shard %s, which does not hold it (no shard does)", c.indexPath, name, shard)
		case filepath.Base(ref.file.path) != shard:
			return fmt.Errorf("%s: field weight_map entry %q names shard %s, which does not hold it (%s does)", c.indexPath, name, shard, filepath.Base(ref.file.path))
		}
	}
	return nil
}

func (c *Checkpoint) mapFile(path string) error {
	if err := format.CheckRegular(path); err != nil { // before os.Open, which blocks on a FIFO
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < 8 {
		return fmt.Errorf("%s: truncated: %d bytes, a safetensors file needs at least 8", path, fi.Size())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("%s: mmap: %w", path, err)
	}
	sf := &stFile{path: path, data: data}
	c.files = append(c.files, sf)
	return c.addFile(sf)
}

// addFile parses the safetensors file sf (its data read or mapped) and adds
// its tensors to c. A tensor already added from another file is an error,
// unless the index names one of the two files for it: that one serves it
// (as HF loads each tensor from the shard its index names).
func (c *Checkpoint) addFile(sf *stFile) (err error) {
	path, data := sf.path, sf.data
	if err := sthead.Check(path, data); err != nil {
		return err
	}
	if sf.st, err = safetensors.Deserialize(data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, nv := range sf.st.Tensors() {
		if _, err := toDType(nv.TensorView.DType()); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", path, nv.Name, err)
		}
		if prev, dup := c.tensors[nv.Name]; dup {
			want, listed := c.index[nv.Name]
			switch {
			case listed && filepath.Base(prev.file.path) == want:
				continue
			case listed && filepath.Base(path) == want:
			case listed:
				return fmt.Errorf("%s: tensor %s also stored in %s, and %s names neither (it names %s)", path, nv.Name, prev.file.path, c.indexPath, want)
			default:
				return fmt.Errorf("%s: tensor %s also stored in %s", path, nv.Name, prev.file.path)
			}
		}
		c.tensors[nv.Name] = tensorRef{file: sf, name: nv.Name}
	}
	return nil
}

func toDType(d safetensors.DType) (format.DType, error) {
	switch d {
	case safetensors.F32:
		return format.F32, nil
	case safetensors.F16:
		return format.F16, nil
	case safetensors.BF16:
		return format.BF16, nil
	case safetensors.I32:
		return format.I32, nil
	case safetensors.F64:
		return format.F64, nil
	}
	return 0, fmt.Errorf("dtype %v is not read (supported: F32, F16, BF16)", d)
}

// Has reports whether the checkpoint stores the named tensor.
func (c *Checkpoint) Has(name string) bool { _, ok := c.tensors[name]; return ok }

// Names returns the stored tensor names, sorted.
func (c *Checkpoint) Names() []string { return c.names }

// Tensor returns a zero-copy view of the named tensor, or an error naming it
// and the folder when it is not stored.
func (c *Checkpoint) Tensor(name string) (format.Tensor, error) {
	ref, ok := c.tensors[name]
	if !ok {
		return format.Tensor{}, fmt.Errorf("tensor %s not found", name)
	}
	v, _ := ref.file.st.Tensor(name)
	dt, _ := toDType(v.DType())
	shape := make([]int, len(v.Shape()))
	for i, d := range v.Shape() {
		shape[i] = int(d)
	}
	return format.Tensor{Name: name, DType: dt, Shape: shape, Data: v.Data()}, nil
}

// Release tells the kernel that the named tensor's pages will not be read
// again soon (madvise MADV_DONTNEED on the whole pages inside it), so a
// streaming reader's resident memory stays near one tensor. Later reads of
// the tensor still work: the pages fault in again from the file.
func (c *Checkpoint) Release(name string) {
	ref, ok := c.tensors[name]
	if !ok {
		return
	}
	v, _ := ref.file.st.Tensor(name)
	d := v.Data()
	if len(d) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(&ref.file.data[0]))
	start := uintptr(unsafe.Pointer(&d[0])) - base
	end := start + uintptr(len(d))
	page := uintptr(os.Getpagesize())
	start = (start + page - 1) &^ (page - 1)
	end &^= page - 1
	if end > start {
		_ = unix.Madvise(ref.file.data[start:end], unix.MADV_DONTNEED)
	}
}

// Digest returns the hex SHA-256 of config.json and every weight file's bytes,
// in file-name order: the source identity recorded in .sinf provenance. It
// reads the files in 64 MiB chunks and drops each from resident memory after.
func (c *Checkpoint) Digest() string {
	h := sha256.New()
	h.Write(c.ConfigJSON)
	const chunk = 64 << 20 // a multiple of the page size
	for _, f := range c.files {
		for lo := 0; lo < len(f.data); lo += chunk {
			part := f.data[lo:min(lo+chunk, len(f.data))]
			h.Write(part)
			_ = unix.Madvise(part, unix.MADV_DONTNEED) // keep RSS at one chunk
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Close unmaps the files. Views handed out before must not be used after.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := unix.Munmap(f.data); err != nil && first == nil {
			first = err
		}
	}
	c.files = nil
	return first
}

// Validate checks the whole model a runtime loads from the checkpoint (every
// tensor's presence, shape and dtype: runtime.Check) and that every stored
// tensor is either read, harmless to ignore (runtime.UnusedTensors, whose
// reasons it keeps in c.Ignored) or unknown to the architecture (c.Unknown:
// skipped with a warning in c.Warnings, an error with c.Strict). It returns
// the names the model reads. Errors name the folder and the tensor.
func (c *Checkpoint) Validate() (used map[string]bool, err error) {
	if used, err = runtime.Check(c.Config, c, runtime.LoadOptions{}); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Dir, err)
	}
	return used, c.checkUnused(used)
}

// checkUnused sets c.Ignored, c.Unknown and c.Warnings from the tensors
// the model did not read, or fails naming one that changes the result
// (runtime.UnusedTensors), or, with c.Strict, the unknown ones.
func (c *Checkpoint) checkUnused(used map[string]bool) (err error) {
	c.Warnings = nil
	if c.Ignored, c.Unknown, err = runtime.UnusedTensors(c.Config, c.names, used, c); err != nil {
		return fmt.Errorf("%s: %w", c.Dir, err)
	}
	if len(c.Unknown) > 0 {
		if c.Strict {
			return fmt.Errorf("%s: %w", c.Dir, runtime.UnknownError(c.Config, c.Unknown))
		}
		c.Warnings = append(c.Warnings, runtime.UnknownWarning(c.Config, c.Unknown))
	}
	return nil
}

// Options says how Load and LoadModel read a checkpoint folder.
type Options struct {
	// Strict refuses stored tensors the architecture does not have
	// (Checkpoint.Strict); without it they are skipped with a warning.
	Strict bool
}

// Load opens dir, validates it (as Validate; the ignored tensors are in the
// checkpoint's Ignored, the skipped unknown ones in Unknown and Warnings)
// and binds its weights to a runtime.Model (all layers whole), binding them
// once. On an error, a memory fault included, nothing stays open.
func Load(dir string) (*Checkpoint, *runtime.Model, error) { return LoadWith(dir, Options{}) }

// LoadWith is Load with Options.
func LoadWith(dir string, opt Options) (_ *Checkpoint, _ *runtime.Model, err error) {
	var c *Checkpoint
	defer func() {
		if err != nil && c != nil {
			c.Close()
		}
	}()
	defer CatchFault(dir, &err)()
	if c, err = Open(dir); err != nil {
		c = nil
		return nil, nil, err
	}
	c.Strict = opt.Strict
	m, used, err := runtime.LoadUsed(c.Config, c, runtime.LoadOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	if err := c.checkUnused(used); err != nil {
		return nil, nil, err
	}
	m.Path = dir
	return c, m, nil
}

// CatchFault, deferred with SetPanicOnFault in effect, turns a memory
// fault reading a mapped weight file of the checkpoint in dir (a file
// truncated or replaced while open: SIGBUS) into *err, naming the folder,
// instead of a fatal goroutine dump. It sets SetPanicOnFault for the rest of
// the calling function's goroutine work itself: call it first, as
// defer hf.CatchFault(dir, &err)().
func CatchFault(dir string, err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if !kernels.IsFault(r) {
				panic(r)
			}
			*err = runtime.FaultError(dir, r)
		}
	}
}

// LoadModel is LoadWith plus the folder's tokenizer (tokenizer.json and
// tokenizer_config.json).
func LoadModel(dir string, opt Options) (*Checkpoint, *runtime.Model, *tokenizer.Tokenizer, error) {
	c, m, err := LoadWith(dir, opt)
	if err != nil {
		return nil, nil, nil, err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	return c, m, tok, nil
}

// WeightBytes returns the total size of the checkpoint's safetensors files.
func (c *Checkpoint) WeightBytes() int64 {
	var n int64
	for _, f := range c.files {
		n += int64(len(f.data))
	}
	return n
}
