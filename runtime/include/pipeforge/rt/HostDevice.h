//===- HostDevice.h - PF_HOST_DEVICE for math shared with CUDA kernels ----===//
//
// Functions marked PF_HOST_DEVICE compile for the host and, under nvcc, for
// the device too (backends/cpu/ElementwiseMath.h, AdamWMath.h).
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RT_HOSTDEVICE_H
#define PIPEFORGE_RT_HOSTDEVICE_H

#ifdef __CUDACC__
#define PF_HOST_DEVICE __host__ __device__
#else
#define PF_HOST_DEVICE
#endif

#endif // PIPEFORGE_RT_HOSTDEVICE_H
