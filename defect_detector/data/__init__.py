"""Data pipeline: COCO grayscale dataset, letterbox, augmentation, batching, format conversion, synthetic boards."""

import cv2

from defect_detector.data.collate import build_loader, collate
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.errors import DatasetError
from defect_detector.data.images import IMAGE_SUFFIXES, load_image_gray, to_gray_uint8
from defect_detector.data.letterbox import LetterboxMeta, boxes_from_letterbox, boxes_to_letterbox, letterbox
from defect_detector.data.transforms import apply_transforms, build_transforms

# OpenCV's own thread pool does not survive fork(): a DataLoader worker forked after the parent used it can
# deadlock. Parallelism comes from DataLoader workers instead. (Importing any data module runs this first.)
cv2.setNumThreads(1)

__all__ = [
    "IMAGE_SUFFIXES",
    "CocoDetectionDataset",
    "DatasetError",
    "LetterboxMeta",
    "apply_transforms",
    "boxes_from_letterbox",
    "boxes_to_letterbox",
    "build_loader",
    "build_transforms",
    "collate",
    "letterbox",
    "load_image_gray",
    "to_gray_uint8",
]
