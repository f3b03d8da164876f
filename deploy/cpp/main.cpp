// Run an exported defect_detector TorchScript model on one image with libtorch + OpenCV.
//
//   defect_detector_cpp MODEL.torchscript.pt IMAGE [REFERENCE] [--reference REFERENCE] [--conf 0.25] [--iou 0.5]
//                       [--max-det 100] [--threads N]
//
// The steps (meta.json, letterbox, golden check, NMS, output) are common.hpp's; this file loads the TorchScript
// archive (meta.json is its extra file) and runs its forward: outputs (pred [1, A, 4 + C], stats [1, L, 2]).
// main_pt2.cpp does the same for the AOTInductor .pt2 package.

#include <torch/cuda.h>
#include <torch/script.h>

#include "common.hpp"

int main(int argc, char** argv) {
  return dd::run_example(argc, argv, "defect_detector_cpp", "MODEL.torchscript.pt", [](const std::string& path) {
    const c10::Device device = torch::cuda::is_available() ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU);
    torch::jit::ExtraFilesMap extra{{"meta.json", ""}};
    auto module = std::make_shared<torch::jit::Module>(torch::jit::load(path, device, extra));
    module->eval();
    auto forward = [module](const at::Tensor& input) { return module->forward({input}).toTuple()->elements()[0].toTensor(); };
    return dd::Loaded{extra.at("meta.json"), device, forward};
  });
}
