// Run an exported defect_detector TorchScript model on one image with libtorch + OpenCV.
//
//   defect_detector_cpp MODEL.torchscript.pt IMAGE [REFERENCE] [--reference REFERENCE] [--conf 0.25] [--iou 0.5]
//                       [--max-det 100] [--threads N]
//
// Steps (the same as the Python runtime, defect_detector/deploy/runtime.py):
//   1. read meta.json from the archive (class names, imgsz, channels, half) with a minimal parser;
//   2. read IMAGE as 8-bit grayscale and letterbox it to imgsz x imgsz (aspect kept, centred, pad 114,
//      INTER_AREA when shrinking, INTER_LINEAR when enlarging), divide by 255;
//      a reference model (meta.json "channels": 2) also needs REFERENCE, the golden board ALREADY REGISTERED
//      into IMAGE's pixel frame (same width and height): this example does not align anything (registration
//      lives in Python, defect_detector/data/register.py). It is letterboxed with IMAGE's geometry and stacked
//      as channel 1: input [1, 2, imgsz, imgsz];
//   3. run the model: outputs (pred [1, A, 4 + C] xyxy letterboxed pixels + class probabilities,
//      stats [1, L, 2]);
//   4. keep (anchor, class) pairs scoring above --conf (at most 1000, highest first), NMS per class
//      (cv::dnn::NMSBoxes), keep the --max-det best;
//   5. map boxes back to original pixels (clipped) and print one JSON object per detection:
//      {"label": 2, "category_name": "mousebite", "score": 0.91, "box": [x1, y1, x2, y2]}

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <opencv2/core.hpp>
#include <opencv2/dnn.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kPreNmsTopK = 1000;
constexpr int kPadValue = 114;

struct Meta {
  int imgsz = 0;
  int channels = 1;  // 1: the image; 2: the image and its registered reference
  bool half = false;
  std::vector<std::string> class_names;
};

struct Placement {
  double scale;
  double pad_x;
  double pad_y;
  int orig_w;
  int orig_h;
};

struct Detection {
  int label;
  float score;
  float x1, y1, x2, y2;
};

// Value text after the first occurrence of "key": (the export writes imgsz, channels and class_names before
// any nested object, and no nested key is called half, so the first occurrence is the top-level one).
// npos when the key is absent.
size_t find_value(const std::string& json, const std::string& key) {
  size_t pos = json.find("\"" + key + "\":");
  if (pos == std::string::npos) return pos;
  return json.find_first_not_of(" \t\r\n", pos + key.size() + 3);
}

size_t value_start(const std::string& json, const std::string& key) {
  const size_t pos = find_value(json, key);
  if (pos == std::string::npos) throw std::runtime_error("meta.json has no \"" + key + "\"");
  return pos;
}

Meta parse_meta(const std::string& json) {
  Meta meta;
  meta.imgsz = std::stoi(json.substr(value_start(json, "imgsz")));
  const size_t channels = find_value(json, "channels");  // absent in artifacts older than reference models
  if (channels != std::string::npos) meta.channels = std::stoi(json.substr(channels));
  if (meta.channels != 1 && meta.channels != 2) throw std::runtime_error("meta.json: channels must be 1 or 2");
  meta.half = json.compare(value_start(json, "half"), 4, "true") == 0;
  size_t pos = value_start(json, "class_names");
  const size_t end = json.find(']', pos);
  while (true) {
    const size_t open = json.find('"', pos);
    if (open == std::string::npos || open > end) break;
    const size_t close = json.find('"', open + 1);
    meta.class_names.push_back(json.substr(open + 1, close - open - 1));
    pos = close + 1;
  }
  if (meta.imgsz <= 0 || meta.class_names.empty()) throw std::runtime_error("meta.json: bad imgsz or class_names");
  return meta;
}

// Python's round() (half to even), as the Python letterbox uses it.
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

cv::Mat letterbox(const cv::Mat& gray, int size, Placement& placement) {
  const int h = gray.rows, w = gray.cols;
  const double scale = std::min(static_cast<double>(size) / h, static_cast<double>(size) / w);
  const int new_w = std::min(size, std::max(1, round_half_even(w * scale)));
  const int new_h = std::min(size, std::max(1, round_half_even(h * scale)));
  cv::Mat resized = gray;
  if (new_w != w || new_h != h) {
    cv::resize(gray, resized, cv::Size(new_w, new_h), 0, 0, scale < 1.0 ? cv::INTER_AREA : cv::INTER_LINEAR);
  }
  const int left = (size - new_w) / 2, top = (size - new_h) / 2;
  cv::Mat canvas(size, size, CV_8UC1, cv::Scalar(kPadValue));
  resized.copyTo(canvas(cv::Rect(left, top, new_w, new_h)));
  placement = {scale, static_cast<double>(left), static_cast<double>(top), w, h};
  return canvas;
}

// pred: float32 [A, 4 + C] on the CPU, contiguous. Returns detections in letterboxed pixels, best first.
std::vector<Detection> select(const torch::Tensor& pred, float conf, float iou, int max_det) {
  const int64_t anchors = pred.size(0), cols = pred.size(1), classes = cols - 4;
  const float* p = pred.data_ptr<float>();
  std::vector<Detection> candidates;
  for (int64_t a = 0; a < anchors; ++a) {
    const float* row = p + a * cols;
    for (int64_t c = 0; c < classes; ++c) {
      if (row[4 + c] > conf) candidates.push_back({static_cast<int>(c), row[4 + c], row[0], row[1], row[2], row[3]});
    }
  }
  auto by_score = [](const Detection& a, const Detection& b) { return a.score > b.score; };
  if (static_cast<int>(candidates.size()) > kPreNmsTopK) {
    std::partial_sort(candidates.begin(), candidates.begin() + kPreNmsTopK, candidates.end(), by_score);
    candidates.resize(kPreNmsTopK);
  }
  std::vector<Detection> kept;
  for (int64_t c = 0; c < classes; ++c) {
    std::vector<cv::Rect2d> boxes;
    std::vector<float> scores;
    std::vector<const Detection*> members;
    for (const auto& d : candidates) {
      if (d.label != c) continue;
      boxes.emplace_back(d.x1, d.y1, d.x2 - d.x1, d.y2 - d.y1);
      scores.push_back(d.score);
      members.push_back(&d);
    }
    if (boxes.empty()) continue;
    std::vector<int> indices;
    cv::dnn::NMSBoxes(boxes, scores, conf, iou, indices);
    for (int i : indices) kept.push_back(*members[i]);
  }
  std::stable_sort(kept.begin(), kept.end(), by_score);
  if (static_cast<int>(kept.size()) > max_det) kept.resize(max_det);
  return kept;
}

void to_original(Detection& d, const Placement& pl) {
  auto map = [](float v, double pad, double scale, int limit) {
    return static_cast<float>(std::clamp((v - pad) / scale, 0.0, static_cast<double>(limit)));
  };
  d.x1 = map(d.x1, pl.pad_x, pl.scale, pl.orig_w);
  d.x2 = map(d.x2, pl.pad_x, pl.scale, pl.orig_w);
  d.y1 = map(d.y1, pl.pad_y, pl.scale, pl.orig_h);
  d.y2 = map(d.y2, pl.pad_y, pl.scale, pl.orig_h);
}

int usage() {
  std::cerr << "usage: defect_detector_cpp MODEL.torchscript.pt IMAGE [REFERENCE] [--reference REFERENCE] [--conf 0.25] [--iou 0.5] "
               "[--max-det 100] [--threads N]\n";
  return 2;
}

// The letterboxed model input planes: IMAGE, then (reference model) REFERENCE with IMAGE's geometry.
std::vector<cv::Mat> input_planes(const Meta& meta, const std::string& image_path, const std::string& reference_path,
                                  Placement& placement) {
  const cv::Mat gray = cv::imread(image_path, cv::IMREAD_GRAYSCALE);
  if (gray.empty()) throw std::runtime_error(image_path + ": cannot read image");
  std::vector<cv::Mat> planes{letterbox(gray, meta.imgsz, placement)};
  if (meta.channels == 1) return planes;
  const cv::Mat reference = cv::imread(reference_path, cv::IMREAD_GRAYSCALE);
  if (reference.empty()) throw std::runtime_error(reference_path + ": cannot read reference image");
  if (reference.size() != gray.size()) {
    throw std::runtime_error(reference_path + ": reference is " + std::to_string(reference.cols) + "x" + std::to_string(reference.rows) +
                             " px, the image " + std::to_string(gray.cols) + "x" + std::to_string(gray.rows) +
                             "; register it into the image's pixel frame first");
  }
  Placement same{};
  planes.push_back(letterbox(reference, meta.imgsz, same));  // same size -> the image's scale and padding
  return planes;
}

struct Options {
  std::string model_path, image_path, reference_path;
  float conf = 0.25f, iou = 0.5f;
  int max_det = 100, threads = 0;
};

// MODEL IMAGE [REFERENCE] [--flag value ...]; false on a malformed command line.
bool parse_args(int argc, char** argv, Options& opt) {
  if (argc < 3) return false;
  opt.model_path = argv[1];
  opt.image_path = argv[2];
  int first_flag = 3;
  if (argc > 3 && std::string(argv[3]).rfind("--", 0) != 0) opt.reference_path = argv[first_flag++];
  if ((argc - first_flag) % 2 != 0) return false;
  try {
    for (int i = first_flag; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag == "--reference") opt.reference_path = argv[i + 1];
      else if (flag == "--conf") opt.conf = std::stof(argv[i + 1]);
      else if (flag == "--iou") opt.iou = std::stof(argv[i + 1]);
      else if (flag == "--max-det") opt.max_det = std::stoi(argv[i + 1]);
      else if (flag == "--threads") opt.threads = std::stoi(argv[i + 1]);
      else return false;
    }
  } catch (const std::exception&) {  // not a number
    return false;
  }
  return true;
}

// The model input [1, planes, S, S] (x / 255, the model's dtype, on device) from uint8 [S, S] canvases.
torch::Tensor to_input(const std::vector<cv::Mat>& planes, const Meta& meta, const torch::Device& device) {
  std::vector<torch::Tensor> channels;  // [1, 1, S, S] uint8 each, viewing the OpenCV canvases
  for (const cv::Mat& plane : planes) channels.push_back(torch::from_blob(plane.data, {1, 1, meta.imgsz, meta.imgsz}, torch::kUInt8));
  return torch::cat(channels, 1).to(device).to(meta.half ? torch::kHalf : torch::kFloat32).div(255.0);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_args(argc, argv, opt)) return usage();
  try {
    if (opt.threads > 0) at::set_num_threads(opt.threads);
    const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
    torch::jit::ExtraFilesMap extra{{"meta.json", ""}};
    torch::jit::Module module = torch::jit::load(opt.model_path, device, extra);
    module.eval();
    const Meta meta = parse_meta(extra.at("meta.json"));
    if (meta.channels == 2 && opt.reference_path.empty()) {
      std::cerr << "error: " << opt.model_path << " is a reference model (meta.json channels 2): pass the golden REFERENCE image, "
                << "already registered into IMAGE's pixel frame\n";
      return 2;
    }
    if (meta.channels == 1 && !opt.reference_path.empty()) {
      std::cerr << "error: " << opt.model_path << " takes 1 input channel (no reference); drop REFERENCE\n";
      return 2;
    }

    Placement placement{};
    const std::vector<cv::Mat> planes = input_planes(meta, opt.image_path, opt.reference_path, placement);

    const auto start = std::chrono::steady_clock::now();
    const torch::Tensor input = to_input(planes, meta, device);  // [1, channels, S, S]
    torch::Tensor pred;
    {
      c10::InferenceMode guard;
      const auto outputs = module.forward({input}).toTuple();
      pred = outputs->elements()[0].toTensor()[0].to(torch::kCPU, torch::kFloat32).contiguous();
    }
    std::vector<Detection> detections = select(pred, opt.conf, opt.iou, opt.max_det);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    for (auto& d : detections) {
      to_original(d, placement);
      const std::string& name = d.label < static_cast<int>(meta.class_names.size()) ? meta.class_names[d.label] : std::to_string(d.label);
      std::printf("{\"label\": %d, \"category_name\": \"%s\", \"score\": %.6f, \"box\": [%.3f, %.3f, %.3f, %.3f]}\n", d.label, name.c_str(),
                  d.score, d.x1, d.y1, d.x2, d.y2);
    }
    std::fprintf(stderr, "%zu detections, %.1f ms (model + NMS) on %s\n", detections.size(), ms, device.is_cuda() ? "cuda" : "cpu");
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
