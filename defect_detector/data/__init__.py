"""Data: image reading, COCO grayscale dataset (optionally with golden references), letterbox, tiling, registration,
pair-aware augmentation, batching, format conversion, synthetic boards, drawing. Importing it has no side effects."""
