// The collectives a model running over several ranks asks of its host (issue 16). The host builds the
// communicator (NCCL, or threads for the CPU tests) and injects it at load (LoadOptions::comm); the library never
// starts processes or calls MPI. An abstract class rather than function pointers + context: each implementation
// keeps state (an ncclComm_t, a thread group), and the model holds one non-owning pointer for its lifetime.
//
// Every rank makes the same calls in the same order with the same counts (a rank that stops early leaves the
// others waiting, as with NCCL). Buffers live where the implementation reaches them: host memory for ThreadComm,
// device memory for NcclComm. `stream` is the backend's queue (a cudaStream_t for NCCL; ignored on the host).
#pragma once
#include <cstddef>
#include <cstdint>

#include <dsv41/core/status.hpp>

namespace dsv41::parallel {

enum class Elem { f32, bf16 };  // element types of the buffers (bf16: 16-bit storage)

inline size_t elem_bytes(Elem e) { return e == Elem::f32 ? 4 : 2; }

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf[i] = Σ over ranks of buf[i], in place, count elements.
  virtual Status all_reduce_sum(void* buf, size_t count, Elem t, void* stream) = 0;
  // recv[r·count + i] = rank r's send[i]; recv holds size()·count elements.
  virtual Status all_gather(const void* send, void* recv, size_t count, Elem t, void* stream) = 0;
};

}  // namespace dsv41::parallel
