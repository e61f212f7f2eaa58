package scores

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/selectinfer/sinf/convert/sthead"
	"github.com/selectinfer/sinf/format"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nlpodyssey/safetensors"
)

// Write writes f to path as a score file. It writes a temporary file in the
// same folder, syncs it and renames it over path, so path either keeps its
// old content or gets the complete new one; the temporary file is removed on
// any error. f is checked first (counts, shapes, finite scores, the
// normalized/merged_from invariants of spec/scores.md).
func Write(path string, f *File) error {
	if f == nil {
		return fmt.Errorf("%s: nil score file", path)
	}
	if err := f.validate(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	meta, err := f.metadata()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	n := f.IntermediateSize()
	views := make(map[string]safetensors.TensorView, len(f.Scores))
	for l, row := range f.Scores {
		data := make([]byte, 0, 8*len(row))
		for _, v := range row {
			data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
		}
		tv, err := safetensors.NewTensorView(safetensors.F64, []uint64{uint64(n)}, data)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", path, TensorName(l), err)
		}
		views[TensorName(l)] = tv
	}
	return writeAtomic(path, func(w io.Writer) error {
		return safetensors.SerializeToWriter(views, meta, w)
	})
}

// metadata returns f's safetensors __metadata__ map.
func (f *File) metadata() (map[string]string, error) {
	merged := f.MergedFrom
	if merged == nil {
		merged = []Source{}
	}
	mf, err := json.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyMergedFrom, err)
	}
	return map[string]string{
		KeyFormat:           FormatName,
		KeyFormatVersion:    strconv.Itoa(FormatVersion),
		KeyModelDigest:      f.ModelDigest,
		KeyTask:             f.Task,
		KeyDataset:          f.Dataset,
		KeyPrompts:          strconv.Itoa(f.Prompts),
		KeyInputTokens:      strconv.FormatInt(f.InputTokens, 10),
		KeyGeneratedTokens:  strconv.FormatInt(f.GeneratedTokens, 10),
		KeyShard:            f.Shard,
		KeyToolVersion:      f.ToolVersion,
		KeyMergedFrom:       string(mf),
		KeyNormalized:       strconv.FormatBool(f.Normalized),
		KeyLayers:           strconv.Itoa(len(f.Scores)),
		KeyIntermediateSize: strconv.Itoa(f.IntermediateSize()),
	}, nil
}

// failBeforeRename, when set (by tests), is called after the temporary file
// is written and synced and before it is renamed; an error it returns aborts
// the write.
var failBeforeRename func(tmp string) error

// writeAtomic writes path through a temporary file in the same folder:
// write, flush, fsync, close, rename, then fsync the folder (best effort).
// On error the temporary file is removed and path is untouched.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, release, err := format.CreateTemp(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer release() // after the rename or the removal below
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = write(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if failBeforeRename != nil {
		if err = failBeforeRename(tmpName); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err = os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync() // make the rename durable; not all systems allow it
		d.Close()
	}
	return nil
}

// Read reads a score file. Errors name the file and the field at fault: not
// a safetensors file (ErrNotSafetensors), no or another "format" key
// (ErrNotScoreFile), a newer format_version (ErrNewerVersion), a missing or
// malformed metadata value, a missing, extra, non-F64 or wrong-shaped score
// tensor, layers inconsistent with the tensors.
func Read(path string) (*File, error) {
	if format.IsSinf(path) { // before reading what may be gigabytes; its first bytes as a header length say "header too large"
		return nil, fmt.Errorf("%s: %w: it is a .sinf model file (score files come from sinf profile and sinf merge)", path, ErrNotScoreFile)
	}
	data, err := format.ReadRegularFile(path)
	if err != nil {
		return nil, err
	}
	return readBytes(path, data)
}

// readBytes is Read of a file's bytes; path labels errors.
func readBytes(path string, data []byte) (*File, error) {
	if err := sthead.Check(path, data); err != nil { // another format, truncation, a repeated tensor name
		return nil, notSafetensors{err}
	}
	_, md, err := safetensors.ReadMetadata(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrNotSafetensors, err)
	}
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrNotSafetensors, err)
	}
	f, err := decode(md.Metadata(), st.Tensor, st.Names())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// decode turns a header's __metadata__ map and tensors into a File.
func decode(meta map[string]string, tensor func(string) (safetensors.TensorView, bool), names []string) (*File, error) {
	format, ok := meta[KeyFormat]
	if !ok {
		return nil, fmt.Errorf("%w: __metadata__ has no %q key (want %q)", ErrNotScoreFile, KeyFormat, FormatName)
	}
	if format != FormatName {
		return nil, fmt.Errorf("%w: %s is %q, want %q", ErrNotScoreFile, KeyFormat, format, FormatName)
	}
	vs, ok := meta[KeyFormatVersion]
	if !ok {
		return nil, fmt.Errorf("%s is missing", KeyFormatVersion)
	}
	version, err := strconv.Atoi(vs)
	if err != nil || version < 1 {
		return nil, fmt.Errorf("%s is %q, want a positive integer", KeyFormatVersion, vs)
	}
	if version > FormatVersion {
		return nil, fmt.Errorf("%w: %s is %d, this reader knows up to %d", ErrNewerVersion, KeyFormatVersion, version, FormatVersion)
	}

	str := func(key string) (string, error) {
		v, ok := meta[key]
		if !ok {
			return "", fmt.Errorf("%s is missing", key)
		}
		return v, nil
	}
	integer := func(key string) (int64, error) {
		v, err := str(key)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s is %q, want a non-negative integer", key, v)
		}
		return n, nil
	}

	f := &File{}
	for _, p := range []struct {
		key string
		dst *string
	}{
		{KeyModelDigest, &f.ModelDigest},
		{KeyTask, &f.Task},
		{KeyDataset, &f.Dataset},
		{KeyShard, &f.Shard},
		{KeyToolVersion, &f.ToolVersion},
	} {
		if *p.dst, err = str(p.key); err != nil {
			return nil, err
		}
	}
	prompts, err := integer(KeyPrompts)
	if err != nil {
		return nil, err
	}
	if prompts > math.MaxInt32 {
		return nil, fmt.Errorf("%s is %d, too large", KeyPrompts, prompts)
	}
	f.Prompts = int(prompts)
	if f.InputTokens, err = integer(KeyInputTokens); err != nil {
		return nil, err
	}
	if f.GeneratedTokens, err = integer(KeyGeneratedTokens); err != nil {
		return nil, err
	}
	ns, err := str(KeyNormalized)
	if err != nil {
		return nil, err
	}
	switch ns {
	case "true":
		f.Normalized = true
	case "false":
	default:
		return nil, fmt.Errorf("%s is %q, want \"true\" or \"false\"", KeyNormalized, ns)
	}
	mf, err := str(KeyMergedFrom)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(mf) != "" {
		if err := json.Unmarshal([]byte(mf), &f.MergedFrom); err != nil {
			return nil, fmt.Errorf("%s is not a JSON list of sources: %v", KeyMergedFrom, err)
		}
		if len(f.MergedFrom) == 0 {
			f.MergedFrom = nil
		}
	}
	layers, err := integer(KeyLayers)
	if err != nil {
		return nil, err
	}
	size, err := integer(KeyIntermediateSize)
	if err != nil {
		return nil, err
	}
	if layers < 1 || layers > 1<<20 {
		return nil, fmt.Errorf("%s is %d, want 1 to %d", KeyLayers, layers, 1<<20)
	}
	if size < 1 {
		return nil, fmt.Errorf("%s is %d, want at least 1", KeyIntermediateSize, size)
	}
	if int64(len(names)) != layers {
		// Name the first tensor that should not be there, or the first missing one.
		want := make(map[string]bool, layers)
		for l := range int(layers) {
			want[TensorName(l)] = true
		}
		sorted := slices.Clone(names)
		slices.Sort(sorted)
		for _, n := range sorted {
			if !want[n] {
				return nil, fmt.Errorf("tensor %s is not a score tensor of a %d-layer file (%s is %d): inconsistent layers", n, layers, KeyLayers, layers)
			}
		}
	}
	f.Scores = make([][]float64, layers)
	for l := range int(layers) {
		name := TensorName(l)
		tv, ok := tensor(name)
		if !ok {
			return nil, fmt.Errorf("tensor %s is missing (%s is %d): inconsistent layers", name, KeyLayers, layers)
		}
		if tv.DType() != safetensors.F64 {
			return nil, fmt.Errorf("tensor %s has dtype %s, want F64", name, tv.DType())
		}
		if shape := tv.Shape(); len(shape) != 1 || shape[0] != uint64(size) {
			return nil, fmt.Errorf("tensor %s has shape %v, want [%d] (%s)", name, shape, size, KeyIntermediateSize)
		}
		raw := tv.Data()
		row := make([]float64, size)
		for i := range row {
			row[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		f.Scores[l] = row
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// notSafetensors is sthead.Check's error as one of ErrNotSafetensors.
type notSafetensors struct{ err error }

func (e notSafetensors) Error() string   { return e.err.Error() }
func (e notSafetensors) Unwrap() []error { return []error{e.err, ErrNotSafetensors} }
