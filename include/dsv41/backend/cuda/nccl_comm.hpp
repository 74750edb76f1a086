// parallel::Communicator over NCCL (issue 16): the host creates the ncclComm_t (ncclCommInitAll for one thread per
// GPU, or ncclGetUniqueId + ncclCommInitRank) and keeps it alive; NcclComm only enqueues collectives on the stream
// the model passes (its own), so they order with its kernels. Buffers are device memory.
// On the lent H200 machines hosts must keep NCCL_NVLS_ENABLE=0 (NVLink multicast there can put the shared host's
// GPUs out of service); the library never calls cuMulticastCreate.
// Compiled only where <nccl.h> exists and DSV41_NO_NCCL is not defined (DSV41_HAVE_NCCL is 1 then); link -lnccl.
#pragma once
#if __has_include(<nccl.h>) && !defined(DSV41_NO_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include <dsv41/core/status.hpp>
#include <dsv41/parallel/communicator.hpp>

#define DSV41_HAVE_NCCL 1

namespace dsv41::gpu {

inline Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return error(Code::internal, std::string("NCCL ") + what + ": " + ncclGetErrorString(r));
}

class NcclComm final : public parallel::Communicator {
 public:
  // comm: initialized by the host, not owned; it must outlive this object.
  static Result<NcclComm> wrap(ncclComm_t comm) {
    if (!comm) return error(Code::invalid_argument, "NcclComm: null communicator");
    int rank = 0, size = 0;
    DSV41_TRY(nccl_status(ncclCommUserRank(comm, &rank), "rank"));
    DSV41_TRY(nccl_status(ncclCommCount(comm, &size), "count"));
    return NcclComm(comm, rank, size);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  ncclComm_t handle() const { return comm_; }

  Status all_reduce_sum(void* buf, size_t count, parallel::Elem t, void* stream) override {
    return nccl_status(ncclAllReduce(buf, buf, count, type(t), ncclSum, comm_, static_cast<cudaStream_t>(stream)),
                       "all_reduce");
  }
  Status all_gather(const void* send, void* recv, size_t count, parallel::Elem t, void* stream) override {
    return nccl_status(ncclAllGather(send, recv, count, type(t), comm_, static_cast<cudaStream_t>(stream)), "all_gather");
  }

 private:
  NcclComm(ncclComm_t c, int rank, int size) : comm_(c), rank_(rank), size_(size) {}
  static ncclDataType_t type(parallel::Elem t) { return t == parallel::Elem::f32 ? ncclFloat32 : ncclBfloat16; }

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace dsv41::gpu
#endif
