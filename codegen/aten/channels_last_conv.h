// codegen/aten/channels_last_conv.h — a CPU conv2d on a channels-last activation, with its weight
// held in channels-last too (codegen/ layer).
//
// passes/channels_last.h gives a conv graph's activations NHWC strides. oneDNN then runs each
// conv in NHWC only if the weight is channels-last as well; given an NCHW weight, ATen converts it
// on every call, and that cost more than the NCHW path saved (ResNet-18 at batch 1 on the 2-core
// bench machine: 64 ms per call against 48 ms NCHW, 42 ms with both in channels-last). So the
// weight is prepared once and held while unchanged (held_weight.h): reordered into oneDNN's own
// layout for the call's input shape, as inductor's CPU freezing does, and run through
// mkldnn::_convolution_pointwise (a 256-channel 3x3 conv at 14x14: 15-25% faster than ATen's
// conv2d on a channels-last weight, same results); where torch lacks those ops, or padding is
// "same"/"valid", a channels-last copy of the weight through ATen's conv2d.
#pragma once
#include "codegen/graph/graph.h"
#include "runtime/executable.h"

namespace fastdyn::codegen {

// The executable for a conv2d node whose input is a channels-last float32 CPU tensor and whose
// weight is a graph value (inputs: its tensor arguments in argument order, each once), or nullptr
// when the node does not qualify.
runtime::ExecutablePtr compile_channels_last_conv(const Graph& g, const Node& n);

}  // namespace fastdyn::codegen
