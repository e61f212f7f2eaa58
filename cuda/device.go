//go:build cuda

package cuda

/*
#cgo CFLAGS: -I${SRCDIR}
#include <stdlib.h>
#include "sinfcuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"unsafe"
)

// Built reports whether this binary has the CUDA kernels (the cuda tag).
const Built = true

// Available returns nil when a CUDA device can be used, else an error naming
// the reason (no driver, a driver older than the runtime, no device).
func Available() error {
	var n C.int
	if rc := C.sinf_device_count(&n); rc != 0 {
		msg := errString(rc)
		switch rc {
		case 35: // cudaErrorInsufficientDriver
			msg += " (no NVIDIA driver is loaded, or it is older than the CUDA runtime this binary links)"
		case 100: // cudaErrorNoDevice
			msg += " (the driver sees no GPU)"
		}
		return fmt.Errorf("cuda: no usable CUDA device: %s", msg)
	}
	if n == 0 {
		return errors.New("cuda: no CUDA device found")
	}
	return nil
}

// DeviceCount returns the number of CUDA devices (0 with the reason when
// there is none).
func DeviceCount() (int, error) {
	if err := Available(); err != nil {
		return 0, err
	}
	var n C.int
	C.sinf_device_count(&n)
	return int(n), nil
}

func errString(rc C.int) string { return C.GoString(C.sinf_error_string(rc)) }

// device is the backend on libsinfcuda.
type device struct {
	ctx  *C.sinf_ctx
	info Info
	raw  C.sinf_device_info
	err  error // the first launch error since the last sync

	registered []uintptr // host ranges registered by placeWeights
	weightMem  Ptr       // device or managed copy of the weights
}

func newBackend(ordinal int) (backend, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var ctx *C.sinf_ctx
	var raw C.sinf_device_info
	if rc := C.sinf_ctx_create(C.int(ordinal), &ctx, &raw); rc != 0 {
		return nil, fmt.Errorf("cuda: device %d: %s", ordinal, errString(rc))
	}
	d := &device{ctx: ctx, raw: raw}
	d.info = Info{
		GPU:         C.GoString(&raw.name[0]),
		Capability:  fmt.Sprintf("%d.%d", raw.major, raw.minor),
		Integrated:  raw.integrated != 0,
		MemoryBytes: int64(raw.total_mem),
		Runtime:     version(int(raw.runtime_version)),
		Driver:      version(int(raw.driver_version)),
	}
	return d, nil
}

func version(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

func (d *device) deviceInfo() Info { return d.info }

func (d *device) check(op string, rc C.int) {
	if rc != 0 && d.err == nil {
		d.err = fmt.Errorf("cuda: %s: %s", op, errString(rc))
	}
}

func (d *device) alloc(bytes int) (Ptr, error) {
	var p C.sinf_dptr
	if rc := C.sinf_malloc(d.ctx, C.size_t(bytes), &p); rc != 0 {
		return 0, fmt.Errorf("cuda: allocating %d bytes of device memory: %s", bytes, errString(rc))
	}
	return Ptr(p), nil
}

func (d *device) free(p Ptr) {
	if p != 0 {
		C.sinf_free(d.ctx, C.sinf_dptr(p))
	}
}

// placeWeights: on an integrated GPU, or with mapped, the pages holding the
// blobs are registered read-only and read in place (no copy). When the
// device cannot register host memory, or registration fails, an integrated
// GPU gets one copy in managed memory and a discrete one a device copy; the
// note says why.
func (d *device) placeWeights(blobs [][]byte, mapped bool) (placement, error) {
	var note string
	if d.info.Integrated || mapped {
		switch {
		case d.raw.host_register_supported == 0:
			note = "the device does not support registering host memory (cudaDevAttrHostRegisterSupported = 0)"
		default:
			ptrs, err := d.register(blobs)
			if err == nil {
				return placement{ptrs: ptrs, weights: "mapped"}, nil
			}
			note = err.Error()
		}
		if d.info.Integrated {
			ptrs, err := d.copyWeights(blobs, true)
			if err != nil {
				return placement{}, err
			}
			fmt.Fprintf(os.Stderr, "cuda: weights copied once to managed memory: %s\n", note)
			return placement{ptrs: ptrs, weights: "managed", note: note}, nil
		}
		fmt.Fprintf(os.Stderr, "cuda: --mapped: weights copied to device memory instead: %s\n", note)
	}
	ptrs, err := d.copyWeights(blobs, false)
	if err != nil {
		return placement{}, err
	}
	return placement{ptrs: ptrs, weights: "device", note: note}, nil
}

// register page-locks the pages under the blobs, merged into contiguous
// spans, with cudaHostRegisterMapped|cudaHostRegisterReadOnly.
func (d *device) register(blobs [][]byte) ([]Ptr, error) {
	page := uintptr(os.Getpagesize())
	type rng struct {
		lo, hi uintptr
		blob   int
	}
	rs := make([]rng, len(blobs))
	for i, b := range blobs {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		rs[i] = rng{a &^ (page - 1), (a + uintptr(len(b)) + page - 1) &^ (page - 1), i}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	type span struct {
		lo, hi uintptr
		dev    Ptr
	}
	var spans []span
	for _, r := range rs {
		if n := len(spans); n > 0 && r.lo <= spans[n-1].hi {
			spans[n-1].hi = max(spans[n-1].hi, r.hi)
			continue
		}
		spans = append(spans, span{lo: r.lo, hi: r.hi})
	}
	for i := range spans {
		sp := &spans[i]
		var dev C.sinf_dptr
		if rc := C.sinf_host_register(d.ctx, C.uintptr_t(sp.lo), C.size_t(sp.hi-sp.lo), 1, &dev); rc != 0 {
			d.releaseWeights()
			return nil, fmt.Errorf("read-only registration of the mapped weights (%d bytes at %#x) failed: %s", sp.hi-sp.lo, sp.lo, errString(rc))
		}
		sp.dev = Ptr(dev)
		d.registered = append(d.registered, sp.lo)
	}
	ptrs := make([]Ptr, len(blobs))
	for _, r := range rs {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(blobs[r.blob])))
		k := sort.Search(len(spans), func(k int) bool { return spans[k].hi > a }) // the span holding a
		ptrs[r.blob] = spans[k].dev.add(int(a - spans[k].lo))
	}
	return ptrs, nil
}

// copyWeights copies every blob once into one allocation (managed or
// device), each at a 256-byte aligned offset.
func (d *device) copyWeights(blobs [][]byte, managed bool) ([]Ptr, error) {
	offs := make([]int, len(blobs))
	total := 0
	for i, b := range blobs {
		offs[i] = total
		total += (len(b) + 255) &^ 255
	}
	var base C.sinf_dptr
	var rc C.int
	if managed {
		rc = C.sinf_malloc_managed(d.ctx, C.size_t(total), &base)
	} else {
		rc = C.sinf_malloc(d.ctx, C.size_t(total), &base)
	}
	kind := "device"
	if managed {
		kind = "managed"
	}
	if rc != 0 {
		return nil, fmt.Errorf("cuda: allocating %d bytes of %s memory for the weights: %s", total, kind, errString(rc))
	}
	d.weightMem = Ptr(base)
	ptrs := make([]Ptr, len(blobs))
	for i, b := range blobs {
		ptrs[i] = Ptr(base).add(offs[i])
		if err := d.upload(ptrs[i], b); err != nil {
			d.releaseWeights()
			return nil, fmt.Errorf("cuda: copying the weights to %s memory: %w", kind, err)
		}
	}
	return ptrs, nil
}

func (d *device) releaseWeights() {
	for _, a := range d.registered {
		C.sinf_host_unregister(d.ctx, C.uintptr_t(a))
	}
	d.registered = nil
	if d.weightMem != 0 {
		d.free(d.weightMem)
		d.weightMem = 0
	}
}

func (d *device) upload(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if rc := C.sinf_upload(d.ctx, C.sinf_dptr(dst), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src))); rc != 0 {
		return fmt.Errorf("cuda: copy to the device: %s", errString(rc))
	}
	return nil
}

func (d *device) download(dst []byte, src Ptr) error {
	if err := d.takeErr(); err != nil {
		return err
	}
	var rc C.int
	if len(dst) == 0 {
		rc = C.sinf_sync(d.ctx)
	} else {
		rc = C.sinf_download(d.ctx, unsafe.Pointer(unsafe.SliceData(dst)), C.sinf_dptr(src), C.size_t(len(dst)))
	}
	if rc != 0 {
		return fmt.Errorf("cuda: copy to the host: %s", errString(rc))
	}
	return nil
}

func (d *device) takeErr() error {
	err := d.err
	d.err = nil
	return err
}

func (d *device) zero(p Ptr, bytes int) {
	d.check("memset", C.sinf_memset0(d.ctx, C.sinf_dptr(p), C.size_t(bytes)))
}

func (d *device) sync() error {
	if err := d.takeErr(); err != nil {
		C.sinf_sync(d.ctx)
		return err
	}
	if rc := C.sinf_sync(d.ctx); rc != 0 {
		return fmt.Errorf("cuda: %s", errString(rc))
	}
	return nil
}

func (d *device) close() {
	if d.ctx == nil {
		return
	}
	d.releaseWeights()
	C.sinf_ctx_destroy(d.ctx)
	d.ctx = nil
}

func cmat(w weight) C.sinf_mat {
	return C.sinf_mat{data: C.sinf_dptr(w.p), dtype: C.int32_t(w.dtype), rows: C.int32_t(w.rows), cols: C.int32_t(w.cols)}
}

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func dp(p Ptr) C.sinf_dptr { return C.sinf_dptr(p) }

func (d *device) embed(dst Ptr, w weight, ids Ptr, id0, T int) {
	d.check("embed", C.sinf_embed(d.ctx, dp(dst), cmat(w), dp(ids), C.int(id0), C.int(T)))
}

func (d *device) rmsnorm(dst, x, w Ptr, T, H int, eps float64) {
	d.check("rmsnorm", C.sinf_rmsnorm(d.ctx, dp(dst), dp(x), dp(w), C.int(T), C.int(H), C.double(eps)))
}

func (d *device) matvec(dst Ptr, w weight, rows Ptr, n int, x, bias Ptr, accumulate bool) {
	d.check("matvec", C.sinf_matvec(d.ctx, dp(dst), cmat(w), dp(rows), C.int(n), dp(x), dp(bias), b2i(accumulate)))
}

func (d *device) gateUp(dst Ptr, gate, up weight, rows Ptr, n int, x Ptr) {
	d.check("gate_up", C.sinf_gate_up(d.ctx, dp(dst), cmat(gate), cmat(up), dp(rows), C.int(n), dp(x)))
}

func (d *device) addRows(dst Ptr, w weight, rows Ptr, n int, a Ptr, accumulate bool) {
	d.check("add_rows", C.sinf_add_rows(d.ctx, dp(dst), cmat(w), dp(rows), C.int(n), dp(a), b2i(accumulate)))
}

func (d *device) gemm(dst Ptr, w weight, x Ptr, T int, bias Ptr, accumulate bool) {
	d.check("gemm", C.sinf_gemm(d.ctx, dp(dst), cmat(w), dp(x), C.int(T), dp(bias), b2i(accumulate)))
}

func (d *device) gemmRowsT(dst Ptr, w weight, a Ptr, T int, accumulate bool) {
	d.check("gemm_rows_t", C.sinf_gemm_rows_t(d.ctx, dp(dst), cmat(w), dp(a), C.int(T), b2i(accumulate)))
}

func (d *device) siluMul(g, u Ptr, n int) {
	d.check("silu_mul", C.sinf_silu_mul(d.ctx, dp(g), dp(u), C.int(n)))
}

func (d *device) rope(x, cos, sin Ptr, pos0, T, heads, hd, stride int) {
	d.check("rope", C.sinf_rope(d.ctx, dp(x), dp(cos), dp(sin), C.int(pos0), C.int(T), C.int(heads), C.int(hd), C.int(stride)))
}

func (d *device) attention(out, q, kc, vc Ptr, pos0, T, heads, kvHeads, hd int) {
	d.check("attention", C.sinf_attention(d.ctx, dp(out), dp(q), dp(kc), dp(vc), C.int(pos0), C.int(T), C.int(heads), C.int(kvHeads), C.int(hd)))
}

func (d *device) argmax(out, x Ptr, n int) {
	d.check("argmax", C.sinf_argmax(d.ctx, dp(out), dp(x), C.int(n)))
}

func (d *device) countTop(counts, act Ptr, T, kept int, alpha float64) {
	d.check("count_top", C.sinf_count_top(d.ctx, dp(counts), dp(act), C.int(T), C.int(kept), C.double(alpha)))
}

func (d *device) selectTop(rows, counts Ptr, kept, static, target int) {
	d.check("select_top", C.sinf_select_top(d.ctx, dp(rows), dp(counts), C.int(kept), C.int(static), C.int(target)))
}

func (d *device) gateCalib(A, S, a, u Ptr, T, kept int) {
	d.check("gate_calib", C.sinf_gate_calib(d.ctx, dp(A), dp(S), dp(a), dp(u), C.int(T), C.int(kept)))
}

func (d *device) gateWeights(w, A, S, up, down Ptr, n int) {
	d.check("gate_weights", C.sinf_gate_weights(d.ctx, dp(w), dp(A), dp(S), dp(up), dp(down), C.int(n)))
}

func (d *device) gateScore(keys, g, w Ptr, n int) {
	d.check("gate_score", C.sinf_gate_score(d.ctx, dp(keys), dp(g), dp(w), C.int(n)))
}

func (d *device) sketchWeights(w Ptr, s weight, x, down Ptr, n int) {
	d.check("sketch_weights", C.sinf_sketch_weights(d.ctx, dp(w), cmat(s), dp(x), dp(down), C.int(n)))
}

func (d *device) gatherSiluMul(h, g, rows, u Ptr, n int) {
	d.check("gather_silu_mul", C.sinf_gather_silu_mul(d.ctx, dp(h), dp(g), dp(rows), dp(u), C.int(n)))
}

// CopyBandwidth measures the device-to-device copy bandwidth (bytes read and
// written per second; the best of iters copies of a buffer of the given
// size) on device ordinal: the roofline the kernel benchmarks compare with.
func CopyBandwidth(ordinal, bytes, iters int) (float64, error) {
	be, err := newBackend(ordinal)
	if err != nil {
		return 0, err
	}
	defer be.close()
	d := be.(*device)
	var bps C.double
	if rc := C.sinf_copy_bandwidth(d.ctx, C.size_t(bytes), C.int(iters), &bps); rc != 0 {
		return 0, fmt.Errorf("cuda: copy bandwidth: %s", errString(rc))
	}
	return float64(bps), nil
}

// timerStart and timerStop time the stream on the device (benchmarks).
func (d *device) timerStart() error {
	if rc := C.sinf_timer_start(d.ctx); rc != 0 {
		return fmt.Errorf("cuda: timer: %s", errString(rc))
	}
	return nil
}

func (d *device) timerStop() (float64, error) {
	var s C.double
	if rc := C.sinf_timer_stop(d.ctx, &s); rc != 0 {
		return 0, fmt.Errorf("cuda: timer: %s", errString(rc))
	}
	return float64(s), d.takeErr()
}
