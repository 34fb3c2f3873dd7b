// The layers of ember::nn, by family, one header each. Each layer mirrors its PyTorch
// namesake: parameter names, shapes and default initialisation, so results and state
// dicts are comparable.
#pragma once

#include "layers/activation.h"
#include "layers/attention.h"
#include "layers/containers.h"
#include "layers/conv.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/loss.h"
#include "layers/module.h"
#include "layers/normalization.h"
#include "layers/recurrent.h"
#include "layers/transformer.h"
#include "layers/vision.h"
