// SwiGLU activation, vLLM's silu_and_mul layout: out[t, i] = silu(x[t, i]) * x[t, I + i].
//
// Written in CUDA C++ with hand-written PTX for the loads: each thread reads 16 bytes of the
// gate and 16 bytes of the up operand with `ld.global.nc.L1::no_allocate.v4.u32`. Both operands
// are read exactly once, so they go through the non-coherent (read-only) path and are kept
// out of L1 where they would only evict data that is reused; nvcc emits neither the
// no-allocate hint nor, without proof of alignment, the 128-bit width. Rows whose base is not
// 16-byte aligned (an odd intermediate size, a padded row stride) and the row tail take the
// scalar path.
//
// One entry point per dtype (extern "C", so the names are stable for the loader):
//   silu_and_mul_{f32,f16,bf16}(T *out, const T *x, long long n_inter,
//                               long long stride_x_tok, long long stride_out_tok)
// grid = (tokens, ceil(n_inter / (VEC * blockDim.x))), VEC = 16 / sizeof(T); unit column
// strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ uint4 load_nc_v4(const void *ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// fp32 throughout and one rounding at the store, as the Triton kernel does. The fast
// exp and divide are within a few ulp (far inside fp32's tolerance); a very negative gate
// makes the divisor infinite and __fdividef return 0, which is silu's limit.
__device__ __forceinline__ float silu_mul(float gate, float up) {
  return __fdividef(gate, 1.0f + __expf(-gate)) * up;
}

template <typename T>
__device__ __forceinline__ void silu_and_mul(T *__restrict__ out, const T *__restrict__ x,
                                             long long n_inter, long long stride_x_tok,
                                             long long stride_out_tok) {
  constexpr int VEC = 16 / sizeof(T);
  const long long tok = blockIdx.x;
  const long long col = ((long long)blockIdx.y * blockDim.x + threadIdx.x) * VEC;
  if (col >= n_inter) {
    return;
  }
  const T *gate = x + tok * stride_x_tok;
  const T *up = gate + n_inter;
  T *dst = out + tok * stride_out_tok;
  const bool aligned =
      (((uintptr_t)gate | (uintptr_t)up | (uintptr_t)dst) % 16 == 0) && col + VEC <= n_inter;
  if (aligned) {
    union {
      uint4 raw;
      T v[VEC];
    } g, u, o;
    g.raw = load_nc_v4(gate + col);
    u.raw = load_nc_v4(up + col);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      o.v[i] = from_float<T>(silu_mul(to_float(g.v[i]), to_float(u.v[i])));
    }
    *reinterpret_cast<uint4 *>(dst + col) = o.raw;
  } else {
    for (long long i = col; i < col + VEC && i < n_inter; ++i) {
      dst[i] = from_float<T>(silu_mul(to_float(gate[i]), to_float(up[i])));
    }
  }
}

extern "C" __global__ void silu_and_mul_f32(float *out, const float *x, long long n_inter,
                                            long long stride_x_tok, long long stride_out_tok) {
  silu_and_mul(out, x, n_inter, stride_x_tok, stride_out_tok);
}

extern "C" __global__ void silu_and_mul_f16(__half *out, const __half *x, long long n_inter,
                                            long long stride_x_tok, long long stride_out_tok) {
  silu_and_mul(out, x, n_inter, stride_x_tok, stride_out_tok);
}

extern "C" __global__ void silu_and_mul_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                             long long n_inter, long long stride_x_tok,
                                             long long stride_out_tok) {
  silu_and_mul(out, x, n_inter, stride_x_tok, stride_out_tok);
}
