// The steps the two C++ examples share (main.cpp: TorchScript; main_pt2.cpp: AOTInductor .pt2), the same as the
// Python frame pipeline (defect_detector/inspect/pipeline.py):
//   1. parse meta.json (class names, imgsz, channels, half, golden_check, operating_point) with a minimal parser;
//   2. read IMAGE as 8-bit grayscale and letterbox it to imgsz x imgsz (aspect kept, centred, pad 114,
//      INTER_AREA when shrinking, INTER_LINEAR when enlarging), divide by 255;
//      a reference model (meta.json "channels": 2) also needs REFERENCE, the golden board ALREADY REGISTERED
//      into IMAGE's pixel frame (same width and height): these examples do not align anything (registration
//      lives in Python, defect_detector/align/register.py). The pair is checked first (correlation check below); it is
//      then letterboxed with IMAGE's geometry and stacked as channel 1: input [1, 2, imgsz, imgsz];
//   3. run the model (the caller's forward): pred [1, A, 4 + C] xyxy letterboxed pixels + class probabilities;
//      a siamese golden-template model whose artifact holds the graphs golden and frame (meta.json "graphs") runs the
//      golden image's trunk pass ONCE (golden: the letterboxed reference [1, 1, S, S] -> features c3, c4) and then
//      frame(board [1, 1, S, S], c3, c4) for IMAGE and every --board BOARD: one trunk pass per board;
//   4. keep (anchor, class) pairs scoring above --conf (at most 1000, highest first), NMS per class
//      (cv::dnn::NMSBoxes) at --iou, demote a call overlapping a higher-scored call of another class (the weights'
//      operating_point.cross_class_iou / cross_class_factor, when set; one demoted to --conf or below is dropped),
//      keep the --max-det best; --conf and --iou
//      default to the weights' operating point (meta.json operating_point), as `defect-detector predict` does;
//   5. map boxes back to original pixels (clipped) and print one JSON object per detection:
//      {"label": 2, "category_name": "mousebite", "score": 0.91, "box": [x1, y1, x2, y2]}
//      (with "image": path first when --board gave several boards).
//
// Correlation check: a golden image that does not fit the frame (another design, a blank or stretched image, one not
// registered) must not yield "0 detections". The pair's ZNCC (zero-normalised cross-correlation, both images
// downscaled by golden_check.scale with INTER_AREA and blurred with a Gaussian of golden_check.blur_sigma) must
// reach meta.json's golden_check.min_zncc, else the frame is NOT INSPECTED: one line on stderr, exit code 3.
// It is not Python's golden check (defect_detector/align/golden_check.py: where the two images differ, not how
// much they correlate; not ported here): on DeepPCB it passes most golden images a few pixels off their registration
// and the neighbouring boards of one design that Python refuses, and refuses some boards with large defects that
// Python inspects (deploy/cpp/README.md, "Correlation check", the measured counts).

#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <opencv2/core.hpp>
#include <opencv2/dnn.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dd {

constexpr int kPreNmsTopK = 1000;
constexpr int kPadValue = 114;
constexpr int kNotInspected = 3;  // exit code: the golden image does not fit the frame

struct CorrelationCheck {  // meta.json "golden_check"; these defaults are the export's (artifacts older than the key)
  double min_zncc = 0.5;
  double scale = 0.5;
  double blur_sigma = 1.0;
};

struct OperatingPoint {  // meta.json "operating_point"; these defaults are the runtime's for artifacts without one
  float conf = 0.25f;
  float iou = 0.5f;
  float cross_class_iou = -1.0f;  // null in meta.json: no cross-class demotion
  float cross_class_factor = 0.25f;
};

struct Meta {
  int imgsz = 0;
  int channels = 1;  // 1: the image; 2: the image and its registered reference
  bool half = false;
  std::vector<std::string> class_names;
  CorrelationCheck correlation;
  OperatingPoint point;
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

struct Options {
  std::string model_path, image_path, reference_path;
  std::vector<std::string> boards;  // --board: more boards of the same size, inspected against the same REFERENCE
  float conf = NAN, iou = NAN;  // NAN: the weights' operating point
  int max_det = 100, threads = 0;
};

class NotInspected : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Value text after the first occurrence of "key": at or after `from` (the export writes imgsz, channels and
// class_names before any nested object, and no nested key is called half, so the first occurrence is the
// top-level one). npos when the key is absent.
inline size_t find_value(const std::string& json, const std::string& key, size_t from = 0) {
  size_t pos = json.find("\"" + key + "\":", from);
  if (pos == std::string::npos) return pos;
  return json.find_first_not_of(" \t\r\n", pos + key.size() + 3);
}

inline size_t value_start(const std::string& json, const std::string& key) {
  const size_t pos = find_value(json, key);
  if (pos == std::string::npos) throw std::runtime_error("meta.json has no \"" + key + "\"");
  return pos;
}

// meta.json "golden_check": {"method": "zncc", "scale": s, "blur_sigma": b, "min_zncc": t, ...}; defaults when absent or null.
inline CorrelationCheck parse_correlation_check(const std::string& json) {
  CorrelationCheck check;
  const size_t start = find_value(json, "golden_check");
  if (start == std::string::npos || json[start] != '{') return check;
  const size_t end = json.find('}', start);
  auto number = [&](const char* key, double fallback) {
    const size_t pos = find_value(json, key, start);
    return pos != std::string::npos && pos < end ? std::stod(json.substr(pos)) : fallback;
  };
  check.min_zncc = number("min_zncc", check.min_zncc);
  check.scale = number("scale", check.scale);
  check.blur_sigma = number("blur_sigma", check.blur_sigma);
  if (!(check.scale > 0.0 && check.scale <= 1.0) || check.blur_sigma < 0.0 || check.min_zncc > 1.0) {
    throw std::runtime_error("meta.json: golden_check needs 0 < scale <= 1, blur_sigma >= 0, min_zncc <= 1");
  }
  return check;
}

// meta.json "operating_point": {"conf": c, "iou": i, "cross_class_iou": t or null, "cross_class_factor": f}; defaults
// when absent or null, no demotion when cross_class_iou is null or absent.
inline OperatingPoint parse_operating_point(const std::string& json) {
  OperatingPoint point;
  const size_t start = find_value(json, "operating_point");
  if (start == std::string::npos || json[start] != '{') return point;
  const size_t end = json.find('}', start);
  auto number = [&](const char* key, float fallback) {
    const size_t pos = find_value(json, key, start);
    if (pos == std::string::npos || pos >= end || json.compare(pos, 4, "null") == 0) return fallback;
    return std::stof(json.substr(pos));
  };
  point.conf = number("conf", point.conf);
  point.iou = number("iou", point.iou);
  point.cross_class_iou = number("cross_class_iou", point.cross_class_iou);
  point.cross_class_factor = number("cross_class_factor", point.cross_class_factor);
  return point;
}

inline Meta parse_meta(const std::string& json) {
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
  meta.correlation = parse_correlation_check(json);
  meta.point = parse_operating_point(json);
  return meta;
}

// Python's round() (half to even), as the Python letterbox uses it.
inline int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

inline cv::Mat letterbox(const cv::Mat& gray, int size, Placement& placement) {
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

// The correlation check's score: the ZNCC of two same-size gray images after downscaling (INTER_AREA) and blurring as
// `check` says; 0 when either is flat (benchmarks/golden_check.py `correlation` is the same arithmetic in numpy).
inline double correlation_zncc(const cv::Mat& image, const cv::Mat& golden, const CorrelationCheck& check) {
  auto prepare = [&](const cv::Mat& gray) {
    cv::Mat small, out;
    const cv::Size size(std::max(1, static_cast<int>(gray.cols * check.scale)), std::max(1, static_cast<int>(gray.rows * check.scale)));
    cv::resize(gray, small, size, 0, 0, cv::INTER_AREA);
    small.convertTo(out, CV_32F);
    if (check.blur_sigma > 0.0) cv::GaussianBlur(out, out, cv::Size(0, 0), check.blur_sigma);
    return out;
  };
  cv::Mat a = prepare(image), b = prepare(golden);
  a -= cv::mean(a)[0];
  b -= cv::mean(b)[0];
  const double denom = std::sqrt(a.dot(a) * b.dot(b));
  return denom > 1e-6 ? a.dot(b) / denom : 0.0;
}

inline double box_iou(const Detection& a, const Detection& b) {
  const double w = std::max(0.0f, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  const double h = std::max(0.0f, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  const double inter = w * h;
  const double area = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter;
  return area > 0.0 ? inter / area : 0.0;
}

// Score-sorted calls: each that overlaps a higher-scored call of another class by more than `iou` (IoU) has its
// score multiplied by `factor` (decided on the scores before demotion), then re-sorted (stable), as the Python
// postprocess (defect_detector/model/postprocess.py, demote_cross_class) does.
inline void demote_cross_class(std::vector<Detection>& kept, float iou, float factor) {
  std::vector<bool> demoted(kept.size(), false);
  for (size_t i = 0; i < kept.size(); ++i) {
    for (size_t j = 0; j < i && !demoted[i]; ++j) {
      demoted[i] = kept[j].label != kept[i].label && kept[j].score > kept[i].score && box_iou(kept[i], kept[j]) > iou;
    }
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    if (demoted[i]) kept[i].score *= factor;
  }
  std::stable_sort(kept.begin(), kept.end(), [](const Detection& a, const Detection& b) { return a.score > b.score; });
}

// pred: float32 [A, 4 + C] on the CPU, contiguous. Returns detections in letterboxed pixels, best first.
inline std::vector<Detection> select(const at::Tensor& pred, float conf, float iou, int max_det, const OperatingPoint& point) {
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
  if (point.cross_class_iou >= 0.0f) {
    demote_cross_class(kept, point.cross_class_iou, point.cross_class_factor);
    // a call demoted to --conf or below is no call at it (sorted by score: drop the tail)
    kept.erase(std::find_if(kept.begin(), kept.end(), [conf](const Detection& d) { return !(d.score > conf); }), kept.end());
  }
  if (static_cast<int>(kept.size()) > max_det) kept.resize(max_det);
  return kept;
}

inline void to_original(Detection& d, const Placement& pl) {
  auto map = [](float v, double pad, double scale, int limit) {
    return static_cast<float>(std::clamp((v - pad) / scale, 0.0, static_cast<double>(limit)));
  };
  d.x1 = map(d.x1, pl.pad_x, pl.scale, pl.orig_w);
  d.x2 = map(d.x2, pl.pad_x, pl.scale, pl.orig_w);
  d.y1 = map(d.y1, pl.pad_y, pl.scale, pl.orig_h);
  d.y2 = map(d.y2, pl.pad_y, pl.scale, pl.orig_h);
}

inline int usage(const char* program, const char* model) {
  std::cerr << "usage: " << program << " " << model << " IMAGE [REFERENCE] [--reference REFERENCE] [--board IMAGE ...] [--conf C] "
            << "[--iou I] [--max-det 100] [--threads N]   (--conf, --iou: default the weights' operating point)\n";
  return 2;
}

// The letterboxed model input planes: IMAGE, then (reference model) REFERENCE (read once by the caller, empty for a
// 1-channel model) with IMAGE's geometry, after the correlation check (NotInspected when the pair's ZNCC is below
// meta.correlation.min_zncc).
inline std::vector<cv::Mat> input_planes(const Meta& meta, const std::string& image_path, const cv::Mat& reference,
                                         const std::string& reference_path, Placement& placement) {
  const cv::Mat gray = cv::imread(image_path, cv::IMREAD_GRAYSCALE);
  if (gray.empty()) throw std::runtime_error(image_path + ": cannot read image");
  std::vector<cv::Mat> planes{letterbox(gray, meta.imgsz, placement)};
  if (meta.channels == 1) return planes;
  if (reference.size() != gray.size()) {
    throw std::runtime_error(reference_path + ": reference is " + std::to_string(reference.cols) + "x" + std::to_string(reference.rows) +
                             " px, the image " + std::to_string(gray.cols) + "x" + std::to_string(gray.rows) +
                             "; register it into the image's pixel frame first");
  }
  const double zncc = correlation_zncc(gray, reference, meta.correlation);
  if (!(zncc >= meta.correlation.min_zncc)) {
    char text[200];
    std::snprintf(text, sizeof text, ": golden image does not match this board: correlation check ZNCC %.2f (needs %.2f; meta.json golden_check.min_zncc): ",
                  zncc, meta.correlation.min_zncc);
    throw NotInspected(image_path + text + "wrong board, blank, or not registered; NOT INSPECTED");
  }
  Placement same{};
  planes.push_back(letterbox(reference, meta.imgsz, same));  // same size -> the image's scale and padding
  return planes;
}

// MODEL IMAGE [REFERENCE] [--flag value ...]; false on a malformed command line.
inline bool parse_args(int argc, char** argv, Options& opt) {
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
      else if (flag == "--board") opt.boards.push_back(argv[i + 1]);
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
inline at::Tensor to_input(const std::vector<cv::Mat>& planes, const Meta& meta, const c10::Device& device) {
  std::vector<at::Tensor> channels;  // [1, 1, S, S] uint8 each, viewing the OpenCV canvases
  for (const cv::Mat& plane : planes) channels.push_back(at::from_blob(plane.data, {1, 1, meta.imgsz, meta.imgsz}, at::kByte));
  return at::cat(channels, 1).to(device).to(meta.half ? at::kHalf : at::kFloat).div(255.0);
}

// The first non-empty line of an error message (one line on stderr per failure).
inline std::string first_line(const std::string& text) {
  size_t start = text.find_first_not_of("\r\n");
  if (start == std::string::npos) return text;
  return text.substr(start, text.find_first_of("\r\n", start) - start);
}

// The golden graph's outputs the frame graph takes, in order: c3 and c4. Since v0.17 it also returns the golden image's
// drift statistics (meta.json graphs.golden.outputs "stats"), which this example does not read.
constexpr size_t kGoldenFeatures = 2;

// A loaded model: its meta.json text, the device it runs on, its forward ([1, C, S, S] -> pred [1, A, 4 + C]) and, for a
// siamese golden-template artifact with the graphs golden and frame, those two (empty otherwise): golden([1, 1, S, S]
// letterboxed reference) -> its trunk features; frame([1, 1, S, S] board, features) -> pred [1, A, 4 + C].
struct Loaded {
  std::string meta_json;
  c10::Device device;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::function<std::vector<at::Tensor>(const at::Tensor&)> golden = {};
  std::function<at::Tensor(const at::Tensor&, const std::vector<at::Tensor>&)> frame = {};
};

// The model's predictions for one board's planes: the golden features are computed on the first call and reused
// (`golden` keeps them) when the model has the cached path, else the whole forward on [1, channels, S, S].
inline at::Tensor predict(const Loaded& model, const Meta& meta, const std::vector<cv::Mat>& planes, std::vector<at::Tensor>& golden) {
  c10::InferenceMode guard;
  if (meta.channels == 2 && model.golden && model.frame) {
    if (golden.empty()) {
      const auto start = std::chrono::steady_clock::now();
      golden = model.golden(to_input({planes[1]}, meta, model.device));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "golden features: %.1f ms, computed once for every board\n", ms);
    }
    return model.frame(to_input({planes[0]}, meta, model.device), golden)[0].to(at::kCPU, at::kFloat).contiguous();
  }
  return model.forward(to_input(planes, meta, model.device))[0].to(at::kCPU, at::kFloat).contiguous();
}

// One board: correlation check, model, NMS, JSON lines on stdout (tagged with the image path when `tagged`).
inline void inspect_board(const Loaded& model, const Meta& meta, const Options& opt, const std::string& image_path, const cv::Mat& reference,
                          std::vector<at::Tensor>& golden, bool tagged) {
  Placement placement{};
  const std::vector<cv::Mat> planes = input_planes(meta, image_path, reference, opt.reference_path, placement);
  const auto start = std::chrono::steady_clock::now();
  const at::Tensor pred = predict(model, meta, planes, golden);
  const float conf = std::isnan(opt.conf) ? meta.point.conf : opt.conf;
  const float iou = std::isnan(opt.iou) ? meta.point.iou : opt.iou;
  std::vector<Detection> detections = select(pred, conf, iou, opt.max_det, meta.point);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::string tag = tagged ? "\"image\": \"" + image_path + "\", " : "";
  for (auto& d : detections) {
    to_original(d, placement);
    const std::string& name = d.label < static_cast<int>(meta.class_names.size()) ? meta.class_names[d.label] : std::to_string(d.label);
    std::printf("{%s\"label\": %d, \"category_name\": \"%s\", \"score\": %.6f, \"box\": [%.3f, %.3f, %.3f, %.3f]}\n", tag.c_str(), d.label,
                name.c_str(), d.score, d.x1, d.y1, d.x2, d.y2);
  }
  std::fprintf(stderr, "%s%zu detections, %.1f ms (model + NMS) on %s\n", tagged ? (image_path + ": ").c_str() : "", detections.size(), ms,
               model.device.is_cuda() ? "cuda" : "cpu");
}

// The whole example for IMAGE and every --board: arguments, meta checks, correlation check, model, NMS, JSON lines. `load`
// reads the model (after the thread count is set). Exit codes: 0 ok, 1 error, 2 usage, 3 a board not inspected (correlation check).
inline int run_example(int argc, char** argv, const char* program, const char* model_kind,
                       const std::function<Loaded(const std::string&)>& load) {
  Options opt;
  if (!parse_args(argc, argv, opt)) return usage(program, model_kind);
  int status = 0;
  try {
    if (opt.threads > 0) at::set_num_threads(opt.threads);
    Loaded model = load(opt.model_path);
    const Meta meta = parse_meta(model.meta_json);
    if (meta.channels == 2 && opt.reference_path.empty()) {
      std::cerr << "error: " << opt.model_path << " is a reference model (meta.json channels 2): pass the golden REFERENCE image, "
                << "already registered into IMAGE's pixel frame\n";
      return 2;
    }
    if (meta.channels == 1 && !opt.reference_path.empty()) {
      std::cerr << "error: " << opt.model_path << " takes 1 input channel (no reference); drop REFERENCE\n";
      return 2;
    }

    cv::Mat reference;  // read once: every board is inspected against it
    if (meta.channels == 2) {
      reference = cv::imread(opt.reference_path, cv::IMREAD_GRAYSCALE);
      if (reference.empty()) throw std::runtime_error(opt.reference_path + ": cannot read reference image");
    }
    std::vector<std::string> images{opt.image_path};
    images.insert(images.end(), opt.boards.begin(), opt.boards.end());
    std::vector<at::Tensor> golden;  // the golden image's features, once the first board has passed its correlation check
    for (const std::string& image_path : images) {
      try {
        inspect_board(model, meta, opt, image_path, reference, golden, images.size() > 1);
      } catch (const NotInspected& e) {  // this board only: the others are still inspected
        std::cerr << "not inspected: " << e.what() << "\n";
        status = kNotInspected;
      }
    }
  } catch (const c10::Error& e) {  // libtorch's errors carry a backtrace (and may list an archive): their first line alone
    std::cerr << "error: " << opt.model_path << ": " << first_line(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << first_line(e.what()) << "\n";
    return 1;
  }
  return status;
}

}  // namespace dd
