/* dlpack.h -- the DLPack structs the module reads and writes, written from the public
 * specification (dmlc/dlpack, include/dlpack/dlpack.h, ABI of version 0.8: the unversioned
 * DLManagedTensor that `obj.__dlpack__()` returns in a PyCapsule named "dltensor").
 *
 * Protocol, as the module uses it:
 * - Reading an input: capsule = obj.__dlpack__() (no arguments: the producer returns the
 *   unversioned struct). The module only borrows the tensor: it keeps the capsule alive
 *   while the call runs and then drops it unconsumed, so the producer's capsule destructor
 *   calls the deleter.
 * - Making an output: the module allocates one block (DLManagedTensor, shape, strides and
 *   the data), wraps it in a capsule named "dltensor" and hands it to torch.from_dlpack,
 *   which renames the capsule "used_dltensor" and calls the deleter when the tensor dies.
 *   The capsule's destructor calls the deleter only if nobody consumed it. */
#ifndef TA_PY_DLPACK_H
#define TA_PY_DLPACK_H

#include <stdint.h>

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6
} DLDataTypeCode;

typedef struct {
    uint8_t code;   /* a DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes; /* 1 for a plain (non-vector) element */
} DLDataType;

typedef struct {
    void *data;           /* element 0 is at (char *)data + byte_offset */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;     /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#endif /* TA_PY_DLPACK_H */
