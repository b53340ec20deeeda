extern "C" __global__ void __launch_bounds__(128) fastdyn_kernel(char* a0, char* a1) {
  const i64 n0 = (8LL);
  const i64 n1 = (1000LL);
  const i64 inner_n = 1 * n1;
  (void)inner_n;
  const i64 outer_n = 1 * n0;
  bool vec_ok = false;
  {
    const i64 i0 = 0;
    vec_ok = n1 % 4 == 0 && ((u64)a0) % 16 == 0 && (0LL + i0 * (1000LL)) % 4 == 0 && (1000LL) % 4 == 0 && ((u64)a1) % 16 == 0;
  }
  if (vec_ok && inner_n <= (i64)blockDim.x * 8) {  // the row fits in registers, as vectors
#pragma unroll 1
  for (i64 o = blockIdx.x; o < outer_n; o += gridDim.x) {
    i64 rest = o;
    const i64 i0 = rest;
    float c0[8];
    float c1[8];
    // stage 0: over the row
    float acc0 = __int_as_float(0xff800000);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const i64 q = ((i64)k * blockDim.x + threadIdx.x) * 4;
      if (q < inner_n) {
        const i64 i1 = q;
        const fd_vec<float, 4> L0 = *(const fd_vec<float, 4>*)(((const float*)a0) + 0LL + i0 * (1000LL) + i1);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const i64 j = q + l;
          const float v0_0 = L0.v[l];
          c0[k * 4 + l] = v0_0;
          acc0 = FdMaxLoose<float>()(acc0, v0_0);
        }
      }
    }
    const float red0 = fd_block_reduce(acc0, FdMaxLoose<float>(), __int_as_float(0xff800000));
    // stage 1: over the row
    float acc1 = __int_as_float(0x00000000);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const i64 q = ((i64)k * blockDim.x + threadIdx.x) * 4;
      if (q < inner_n) {
        const i64 i1 = q;
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const i64 j = q + l;
          const float v1_0 = red0;
          const float v1_1 = c0[k * 4 + l];
          const float v1_2 = (v1_1 - v1_0);
          const float v1_3 = expf(v1_2);
          c1[k * 4 + l] = v1_3;
          acc1 = FdSum<float>()(acc1, v1_3);
        }
      }
    }
    const float red1 = fd_block_reduce(acc1, FdSum<float>(), __int_as_float(0x00000000));
    // stage 2: over the row
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const i64 q = ((i64)k * blockDim.x + threadIdx.x) * 4;
      if (q < inner_n) {
        const i64 i1 = q;
        fd_vec<float, 4> S0;
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const i64 j = q + l;
          const float v2_0 = red1;
          const float v2_1 = (__int_as_float(0x3f800000) / v2_0);
          const float v2_2 = c1[k * 4 + l];
          const float v2_3 = (v2_2 * v2_1);
          c1[k * 4 + l] = v2_3;
          S0.v[l] = v2_3;
        }
        *(fd_vec<float, 4>*)(((float*)a1) + 0LL + i0 * (1000LL) + i1) = S0;
      }
    }
    __syncthreads();
  }
    return;
  }
#pragma unroll 1
  for (i64 o = blockIdx.x; o < outer_n; o += gridDim.x) {
    i64 rest = o;
    const i64 i0 = rest;
    // stage 0: over the row
    float acc0 = __int_as_float(0xff800000);
    for (i64 j = threadIdx.x; j < inner_n; j += blockDim.x) {
      i64 rest = j;
      const i64 i1 = rest;
      const float v0_0 = ((const float*)a0)[0LL + i0 * (1000LL) + i1];
      acc0 = FdMaxLoose<float>()(acc0, v0_0);
    }
    const float red0 = fd_block_reduce(acc0, FdMaxLoose<float>(), __int_as_float(0xff800000));
    // stage 1: over the row
    float acc1 = __int_as_float(0x00000000);
    for (i64 j = threadIdx.x; j < inner_n; j += blockDim.x) {
      i64 rest = j;
      const i64 i1 = rest;
      const float v1_0 = red0;
      const float v1_1 = ((const float*)a0)[0LL + i0 * (1000LL) + i1];
      const float v1_2 = (v1_1 - v1_0);
      const float v1_3 = expf(v1_2);
      ((float*)a1)[0LL + i0 * (1000LL) + i1] = v1_3;
      acc1 = FdSum<float>()(acc1, v1_3);
    }
    const float red1 = fd_block_reduce(acc1, FdSum<float>(), __int_as_float(0x00000000));
    __syncthreads();
    // stage 2: over the row
    for (i64 j = threadIdx.x; j < inner_n; j += blockDim.x) {
      i64 rest = j;
      const i64 i1 = rest;
      const float v2_0 = red1;
      const float v2_1 = (__int_as_float(0x3f800000) / v2_0);
      const float v2_2 = ((const float*)a1)[0LL + i0 * (1000LL) + i1];
      const float v2_3 = (v2_2 * v2_1);
      ((float*)a1)[0LL + i0 * (1000LL) + i1] = v2_3;
    }
    __syncthreads();
  }
}
