// ember: the umbrella header (tensors, ops, autograd, memory, layers, optimizers, checkpoints). Light on purpose: no Eigen, CUDA, Boost or JSON headers,
// so a model file that includes it compiles in about two seconds.
#pragma once

#include "base/error.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "core/random.h"
#include "core/runtime.h"
#include "core/safetensors.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "layers/functional.h"
#include "layers/layers.h"
#include "layers/module.h"
#include "optim/checkpoint.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
