// ForwardHooks on the GPU: a debug path (the golden check) that copies rows to the host, calls the hook and copies
// what it may have overwritten back; it synchronizes.
#pragma once
#include <cstdint>
#include <vector>

#include <dsv41/backend/cuda/device_model.hpp>

namespace dsv41::gpu {

class HookCopies : public DeviceModel {
 protected:
  using DeviceModel::DeviceModel;

  // f(H, pre) on host copies of S rows of streams (FP32 from BF16); back: the copies go back to the device after.
  template <class F>
  Status with_host_streams(int S, bf16_t* H, float* pre, bool back, F&& f) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    std::vector<uint16_t> hb(size_t(S) * hc * d);
    std::vector<float> hf(hb.size()), pf(size_t(S) * hc);
    DSV41_CUDA_TRY(cudaMemcpyAsync(hb.data(), H, hb.size() * 2, cudaMemcpyDeviceToHost, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaMemcpyAsync(pf.data(), pre, pf.size() * 4, cudaMemcpyDeviceToHost, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "hook copy");
    for (size_t i = 0; i < hb.size(); ++i) hf[i] = num::bf16_to_f32(hb[i]);
    f(hf.data(), pf.data());
    if (!back) return Status::Ok();
    for (size_t i = 0; i < hb.size(); ++i) hb[i] = num::bf16_bits(hf[i]);
    DSV41_CUDA_TRY(cudaMemcpyAsync(H, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaMemcpyAsync(pre, pf.data(), pf.size() * 4, cudaMemcpyHostToDevice, stream_), "hook copy");
    return cuda_status(cudaStreamSynchronize(stream_), "hook copy");
  }

  Status hook_unit(const ForwardHooks* hooks, bool input, int l, int64_t p0, int S, bf16_t* H, float* pre) const {
    return with_host_streams(S, H, pre, input, [&](float* hf, float* pf) {
      if (input) hooks->unit_input(hooks->ctx, l, p0, S, hf, pf);
      else hooks->unit_output(hooks->ctx, l, p0, S, hf, pf);
    });
  }
  Status hook_taps(const ForwardHooks* hooks, int64_t p0, int S, bf16_t* taps) const {
    const size_t n = size_t(S) * n_taps() * s_.hidden_size;
    std::vector<uint16_t> hb(n);
    std::vector<float> hf(n);
    DSV41_CUDA_TRY(cudaMemcpyAsync(hb.data(), taps, n * 2, cudaMemcpyDeviceToHost, stream_), "taps copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "taps copy");
    for (size_t i = 0; i < n; ++i) hf[i] = num::bf16_to_f32(hb[i]);
    hooks->taps(hooks->ctx, p0, S, n_taps() * s_.hidden_size, hf.data());
    for (size_t i = 0; i < n; ++i) hb[i] = num::bf16_bits(hf[i]);
    DSV41_CUDA_TRY(cudaMemcpyAsync(taps, hb.data(), n * 2, cudaMemcpyHostToDevice, stream_), "taps copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "taps copy");
    return Status::Ok();
  }

  Status hook_topk(const ForwardHooks* hooks, int l, int64_t p0, int S, int32_t* lists) const {
    const int K = s_.index_topk;
    std::vector<int32_t> h(size_t(S) * K);
    DSV41_CUDA_TRY(cudaMemcpyAsync(h.data(), lists, h.size() * 4, cudaMemcpyDeviceToHost, stream_), "topk copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "topk copy");
    hooks->topk(hooks->ctx, l, p0, S, K, h.data());
    DSV41_CUDA_TRY(cudaMemcpyAsync(lists, h.data(), h.size() * 4, cudaMemcpyHostToDevice, stream_), "topk copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "topk copy");
    return Status::Ok();
  }

};

}  // namespace dsv41::gpu
