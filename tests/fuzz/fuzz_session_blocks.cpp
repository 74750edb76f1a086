// The session store's readers on damaged data: a disk block header (decode_header), and a real block's global-KV
// and window payloads (made once from a prefill of the tiny-ced model) damaged by the input — byte 0 picks the
// payload, byte 1 a truncation, then (offset, xor) triples — appended to / restored into a fresh state. A damaged
// payload must be refused or give a state of the right shape; never a crash or an out-of-bounds access.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <dsv41/model/model.hpp>
#include <dsv41/session/disk_format.hpp>
#include <dsv41/session/session_blocks.hpp>

#ifndef DSV41_FIXTURES
#error "DSV41_FIXTURES: the golden model directories"
#endif

namespace {
struct Seeds {
  std::unique_ptr<dsv41::Model<>> model;
  int block = 0;
  std::vector<uint8_t> global, window;
};
const Seeds& seeds() {
  static const Seeds s = [] {
    Seeds r;
    auto m = dsv41::Model<>::load(DSV41_FIXTURES "/tiny-ced");
    if (!m.ok()) return r;
    r.model = std::move(*m);
    r.block = dsv41::session::block_granule(r.model->shape()) * 4;
    dsv41::SequenceState st = r.model->new_sequence(4 * r.block);
    std::vector<int32_t> ids(size_t(2 * r.block));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(3 + (i * 37) % 400);
    if (!r.model->prefill(st, ids).ok()) return r;
    auto g = dsv41::session::global_block(r.model->shape(), r.model->schedule(), st, r.block, 0);
    if (g.ok()) r.global = *g;
    r.window = dsv41::session::window_at(st);
    return r;
  }();
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  dsv41::session::DiskHeader h;
  (void)dsv41::session::decode_header(in, h);
  const Seeds& s = seeds();
  if (!s.model || s.global.empty() || size < 2) return 0;
  std::vector<uint8_t> p = (data[0] & 1) ? s.window : s.global;
  if (data[1] != 0) p.resize(p.size() * data[1] / 256);
  for (size_t i = 2; i + 2 < size; i += 3) {
    if (p.empty()) break;
    const size_t at = (size_t(data[i]) << 8 | data[i + 1]) % p.size();
    p[at] ^= data[i + 2];
  }
  const dsv41::Model<>& m = *s.model;
  dsv41::SequenceState st = m.new_sequence(4 * s.block);
  if (data[0] & 1) {
    (void)dsv41::session::restore_window(st, p);
  } else if (dsv41::session::append_global_block(m.shape(), m.schedule(), st, s.block, 0, p).ok()) {
    (void)dsv41::session::append_global_block(m.shape(), m.schedule(), st, s.block, 1, p);  // out of order: refused
  }
  return 0;
}
