// Run an exported defect_detector AOTInductor package (.pt2, `defect-detector export --format pt2`) on one image.
//
//   defect_detector_pt2 MODEL.pt2 IMAGE [REFERENCE] [--reference REFERENCE] [--board IMAGE ...] [--conf 0.25] [--iou 0.5]
//                       [--max-det 100] [--threads N]
//
// The steps (meta.json, letterbox, correlation check, NMS, output) are common.hpp's; this file loads the package with
// torch::inductor::AOTIModelPackageLoader (libtorch's, no Python): meta.json is the package's AOTInductor metadata
// entry "meta.json", and run() returns {pred [1, A, 4 + C], stats [1, L, 2]}. The package holds a compiled model for
// one device kind (meta.json "aoti_device": cpu or cuda) and the torch version that wrote it: run it with that
// libtorch (the one in the same torch wheel). A siamese golden-template package also holds the models "golden" and
// "frame" (meta.json "graphs"): the golden features are then computed once for IMAGE and every --board.

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "common.hpp"

int main(int argc, char** argv) {
  return dd::run_example(argc, argv, "defect_detector_pt2", "MODEL.pt2", [](const std::string& path) {
    const auto metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
    const auto meta = metadata.find("meta.json");
    if (meta == metadata.end()) throw std::runtime_error(path + ": .pt2 package without meta.json; export it with defect-detector export");
    const auto device_key = metadata.find("AOTI_DEVICE_KEY");
    const bool cuda = device_key != metadata.end() && device_key->second == "cuda";
    auto loader = std::make_shared<torch::inductor::AOTIModelPackageLoader>(path, "model");
    auto forward = [loader](const at::Tensor& input) { return loader->run({input})[0]; };
    dd::Loaded loaded{meta->second, cuda ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU), forward};
    const bool cached = meta->second.find("\"model_name\": \"golden\"") != std::string::npos &&
                        meta->second.find("\"model_name\": \"frame\"") != std::string::npos;
    if (cached) {  // a siamese model's cached path: the package's models golden and frame (meta.json "graphs")
      auto golden = std::make_shared<torch::inductor::AOTIModelPackageLoader>(path, "golden");
      auto frame = std::make_shared<torch::inductor::AOTIModelPackageLoader>(path, "frame");
      loaded.golden = [golden](const at::Tensor& reference) {
        std::vector<at::Tensor> features = golden->run({reference});
        features.resize(std::min(features.size(), dd::kGoldenFeatures));  // c3, c4 (not the drift statistics)
        for (auto& f : features) f = f.contiguous();  // the frame model was compiled for contiguous features
        return features;
      };
      loaded.frame = [frame](const at::Tensor& image, const std::vector<at::Tensor>& features) {
        std::vector<at::Tensor> inputs{image};  // batch 1: the features' batch is the frames' (meta.json graphs.frame)
        inputs.insert(inputs.end(), features.begin(), features.end());
        return frame->run(inputs)[0];
      };
    }
    return loaded;
  });
}
