// Run an exported defect_detector TorchScript model on one image with libtorch + OpenCV.
//
//   defect_detector_cpp MODEL.torchscript.pt IMAGE [REFERENCE] [--reference REFERENCE] [--board IMAGE ...] [--conf 0.25]
//                       [--iou 0.5] [--max-det 100] [--threads N]
//
// The steps (meta.json, letterbox, correlation check, NMS, output) are common.hpp's; this file loads the TorchScript
// archive (meta.json is its extra file) and runs its forward: outputs (pred [1, A, 4 + C], stats [1, L, 2]). A siamese
// golden-template artifact also has the methods golden (reference [B, 1, S, S] -> (c3, c4, stats)) and frame (image [B, 1, S, S],
// c3, c4 -> (pred, stats)): the golden features are then computed once for IMAGE and every --board.
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
    dd::Loaded loaded{extra.at("meta.json"), device, forward};
    if (module->find_method("golden") && module->find_method("frame")) {  // a siamese model's cached path (meta.json "graphs")
      loaded.golden = [module](const at::Tensor& reference) {
        const c10::IValue out = module->get_method("golden")({reference});  // kept alive while its elements are read
        std::vector<at::Tensor> features;
        const auto& outputs = out.toTupleRef().elements();
        for (size_t i = 0; i < dd::kGoldenFeatures && i < outputs.size(); ++i) features.push_back(outputs[i].toTensor());
        return features;
      };
      loaded.frame = [module](const at::Tensor& image, const std::vector<at::Tensor>& golden) {
        std::vector<c10::IValue> inputs{image};
        inputs.insert(inputs.end(), golden.begin(), golden.end());
        return module->get_method("frame")(inputs).toTuple()->elements()[0].toTensor();
      };
    }
    return loaded;
  });
}
