// kv_transfer: the host side of the prefill -> decode KV-cache handoff.
//
// A paged KV pool is a 2-D uint8 buffer of fixed-size pages. `gather` packs a list of pages into
// one contiguous transfer buffer (what goes on the wire), `scatter` unpacks such a buffer into
// pages of a pool, `checksum` fingerprints a buffer so both ends can compare.
//
// Every bound function takes only plain C++ types (BufferView, below): the Python objects are
// turned into views by the type_caster before the call and released after it, so a function
// body never touches Python and could run without the GIL. This first version keeps the GIL.
// Errors are pybind11's C++ exception classes, translated to Python exceptions after the call.
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace py = pybind11;

// A zero-copy view of an object that exports the buffer protocol (numpy array, bytearray,
// memoryview, ...). Filled by type_caster<BufferView>, which owns the Py_buffer behind it.
struct BufferView {
    uint8_t* data = nullptr;        // first byte
    size_t nbytes = 0;              // total bytes (product of shape times itemsize)
    std::vector<int64_t> shape;     // elements per dimension
    std::string format;             // struct-module format code, e.g. "B" (uint8), "l" (int64)
    int64_t itemsize = 0;           // bytes per element
    bool readonly = true;
    bool c_contiguous = false;
};

namespace pybind11 {
namespace detail {

// Python object -> BufferView. Holds the exported buffer (so the exporter can neither free nor
// resize it) until the caster is destroyed, after the bound function has returned.
template <>
struct type_caster<BufferView> {
    PYBIND11_TYPE_CASTER(BufferView, const_name("Buffer"));

public:
    type_caster() = default;
    type_caster(const type_caster&) = delete;
    type_caster& operator=(const type_caster&) = delete;
    ~type_caster() {
        if (held_) PyBuffer_Release(&view_);
    }

    bool load(handle src, bool /*convert*/) {
        if (!src || !PyObject_CheckBuffer(src.ptr())) return false;
        // Read-only request with strides and format: writability, dtype and contiguity are
        // judged by the bound function, which then raises a precise error.
        if (PyObject_GetBuffer(src.ptr(), &view_, PyBUF_RECORDS_RO) != 0) {
            PyErr_Clear();
            return false;  // pybind11 raises TypeError (incompatible arguments)
        }
        held_ = true;
        value.data = static_cast<uint8_t*>(view_.buf);
        value.nbytes = static_cast<size_t>(view_.len);
        value.shape.assign(view_.shape, view_.shape + view_.ndim);
        value.format = view_.format ? view_.format : "B";
        value.itemsize = view_.itemsize;
        value.readonly = view_.readonly != 0;
        value.c_contiguous = PyBuffer_IsContiguous(&view_, 'C') != 0;
        return true;
    }

private:
    Py_buffer view_{};
    bool held_ = false;
};

}  // namespace detail
}  // namespace pybind11

namespace {

// Strips the struct-module byte-order prefix; "" when the prefix means non-native byte order.
std::string native_code(const std::string& format) {
    if (format.empty()) return "B";
    char c = format[0];
    if (c == '@' || c == '=' || c == '<') return format.substr(1);  // x86-64 is little-endian
    if (c == '>' || c == '!') return "";
    return format;
}

std::string describe(const BufferView& v) {
    return "format '" + v.format + "' with itemsize " + std::to_string(v.itemsize);
}

void require_uint8(const BufferView& v, const char* fn, const char* name) {
    std::string code = v.format.empty() ? "B" : v.format;
    if (code[0] == '@' || code[0] == '=' || code[0] == '<' || code[0] == '>' || code[0] == '!')
        code = code.substr(1);  // byte order does not matter for single bytes
    if (code != "B" || v.itemsize != 1)
        throw py::type_error(std::string(fn) + ": " + name + " must be uint8, got " + describe(v));
}

void require_int64(const BufferView& v, const char* fn, const char* name) {
    std::string code = native_code(v.format);
    if ((code != "q" && code != "l") || v.itemsize != 8)
        throw py::type_error(std::string(fn) + ": " + name + " must be int64 (native byte order), got " +
                             describe(v));
}

void require_contiguous(const BufferView& v, const char* fn, const char* name) {
    if (!v.c_contiguous)
        throw py::value_error(std::string(fn) + ": " + name + " must be C-contiguous");
}

void require_writable(const BufferView& v, const char* fn, const char* name) {
    if (v.readonly) throw py::value_error(std::string(fn) + ": " + name + " is read-only");
}

void require_ndim(const BufferView& v, size_t ndim, const char* fn, const char* name, const char* layout) {
    if (v.shape.size() != ndim)
        throw py::value_error(std::string(fn) + ": " + name + " must be " + std::to_string(ndim) + "-D " +
                              layout + ", got ndim " + std::to_string(v.shape.size()));
}

// Half-open byte ranges [a, a + na) and [b, b + nb) share a byte. memcpy between overlapping
// ranges is undefined, and a handoff that reads what it writes is a caller bug.
bool overlaps(const uint8_t* a, size_t na, const uint8_t* b, size_t nb) {
    if (na == 0 || nb == 0) return false;
    auto pa = reinterpret_cast<std::uintptr_t>(a);
    auto pb = reinterpret_cast<std::uintptr_t>(b);
    return pa < pb + nb && pb < pa + na;
}

// pool: [num_pages, page_bytes] uint8, C-contiguous.
struct PoolShape {
    int64_t num_pages;
    size_t page_bytes;
};

PoolShape pool_shape(const BufferView& pool, const char* fn) {
    require_uint8(pool, fn, "pool");
    require_ndim(pool, 2, fn, "pool", "[num_pages, page_bytes]");
    require_contiguous(pool, fn, "pool");
    return {pool.shape[0], static_cast<size_t>(pool.shape[1])};
}

// page_ids: [n] int64, C-contiguous. Returns n.
size_t id_count(const BufferView& page_ids, const char* fn) {
    require_int64(page_ids, fn, "page_ids");
    require_ndim(page_ids, 1, fn, "page_ids", "[n]");
    require_contiguous(page_ids, fn, "page_ids");
    return static_cast<size_t>(page_ids.shape[0]);
}

// memcpy: the view's data need not be 8-byte aligned (e.g. a memoryview slice).
int64_t page_id(const BufferView& page_ids, size_t i) {
    int64_t id;
    std::memcpy(&id, page_ids.data + i * sizeof(int64_t), sizeof(int64_t));
    return id;
}

// Every id is checked before the first byte moves, so a rejected call writes nothing.
void check_page_ids(const BufferView& page_ids, size_t n, int64_t num_pages, const char* fn) {
    for (size_t i = 0; i < n; ++i) {
        int64_t id = page_id(page_ids, i);
        if (id < 0 || id >= num_pages)
            throw py::index_error(std::string(fn) + ": page_ids[" + std::to_string(i) + "] = " +
                                  std::to_string(id) + " is out of range for a pool of " +
                                  std::to_string(num_pages) + " pages");
    }
}

// n * page_bytes, the bytes one transfer moves; rejects a product that does not fit.
size_t transfer_bytes(size_t n, size_t page_bytes, const char* fn) {
    if (page_bytes != 0 && n > SIZE_MAX / page_bytes)
        throw py::value_error(std::string(fn) + ": n * page_bytes overflows");
    return n * page_bytes;
}

void require_room(const BufferView& v, size_t need, const char* fn, const char* name) {
    if (v.nbytes < need)
        throw py::value_error(std::string(fn) + ": " + name + " has " + std::to_string(v.nbytes) +
                              " bytes, the transfer needs " + std::to_string(need));
}

}  // namespace

// Packs pages of a pool into a transfer buffer: out[i * page_bytes : (i + 1) * page_bytes] =
// pool[page_ids[i]]. Repeated ids are allowed. Bytes of out past n * page_bytes are untouched.
//   pool:     [num_pages, page_bytes] uint8   read
//   page_ids: [n] int64                       read
//   out:      [>= n * page_bytes] uint8       written (any shape, C-contiguous)
void gather(const BufferView& pool, const BufferView& page_ids, const BufferView& out) {
    const PoolShape p = pool_shape(pool, "gather");
    const size_t n = id_count(page_ids, "gather");
    require_uint8(out, "gather", "out");
    require_contiguous(out, "gather", "out");
    require_writable(out, "gather", "out");
    const size_t need = transfer_bytes(n, p.page_bytes, "gather");
    require_room(out, need, "gather", "out");
    if (overlaps(out.data, need, pool.data, pool.nbytes) || overlaps(out.data, need, page_ids.data, page_ids.nbytes))
        throw py::value_error("gather: out overlaps pool or page_ids");
    check_page_ids(page_ids, n, p.num_pages, "gather");
    if (p.page_bytes == 0) return;
    for (size_t i = 0; i < n; ++i) {
        const uint8_t* src = pool.data + static_cast<size_t>(page_id(page_ids, i)) * p.page_bytes;
        std::memcpy(out.data + i * p.page_bytes, src, p.page_bytes);
    }
}

// Unpacks a transfer buffer into pages of a pool: pool[page_ids[i]] = buf[i * page_bytes :
// (i + 1) * page_bytes]. Repeated ids are allowed: pages are written in order, the last wins.
//   buf:      [>= n * page_bytes] uint8       read (any shape, C-contiguous)
//   page_ids: [n] int64                       read
//   pool:     [num_pages, page_bytes] uint8   written (only the listed pages)
void scatter(const BufferView& buf, const BufferView& page_ids, const BufferView& pool) {
    const PoolShape p = pool_shape(pool, "scatter");
    require_writable(pool, "scatter", "pool");
    const size_t n = id_count(page_ids, "scatter");
    require_uint8(buf, "scatter", "buf");
    require_contiguous(buf, "scatter", "buf");
    const size_t need = transfer_bytes(n, p.page_bytes, "scatter");
    require_room(buf, need, "scatter", "buf");
    if (overlaps(pool.data, pool.nbytes, buf.data, need) || overlaps(pool.data, pool.nbytes, page_ids.data, page_ids.nbytes))
        throw py::value_error("scatter: pool overlaps buf or page_ids");
    check_page_ids(page_ids, n, p.num_pages, "scatter");
    if (p.page_bytes == 0) return;
    for (size_t i = 0; i < n; ++i) {
        uint8_t* dst = pool.data + static_cast<size_t>(page_id(page_ids, i)) * p.page_bytes;
        std::memcpy(dst, buf.data + i * p.page_bytes, p.page_bytes);
    }
}

// sum_i byte_i * (i + 1) mod 2^64 over every byte: position-weighted, so a moved or swapped
// byte changes it, and numpy can compute it with wrapping uint64 arithmetic.
//   buf: any shape and dtype, C-contiguous   read
uint64_t checksum(const BufferView& buf) {
    require_contiguous(buf, "checksum", "buf");
    uint64_t sum = 0;
    for (size_t i = 0; i < buf.nbytes; ++i) sum += static_cast<uint64_t>(buf.data[i]) * (i + 1);
    return sum;
}

PYBIND11_MODULE(kv_transfer, m) {
    m.doc() = "Paged KV-cache transfer on the host: gather pages into a buffer, scatter them back, checksum.";
    m.def("gather", &gather, py::arg("pool"), py::arg("page_ids"), py::arg("out"),
          "out[i*B:(i+1)*B] = pool[page_ids[i]] for a uint8 pool [num_pages, B], int64 page_ids [n] and a\n"
          "writable uint8 out of at least n*B bytes. Zero-copy; raises IndexError, TypeError or ValueError.");
    m.def("scatter", &scatter, py::arg("buf"), py::arg("page_ids"), py::arg("pool"),
          "pool[page_ids[i]] = buf[i*B:(i+1)*B] in order (the last of repeated ids wins) for a uint8 buf of at\n"
          "least n*B bytes, int64 page_ids [n] and a writable uint8 pool [num_pages, B].");
    m.def("checksum", &checksum, py::arg("buf"),
          "sum over all bytes of byte_i * (i + 1) mod 2**64, for any C-contiguous buffer.");
}
