"""LightningDataModules shared by every family."""

from zoo.data.byte_corpora import load_byte_corpus
from zoo.data.images import ImageDataModule
from zoo.data.long_range import (
    LongRangeTaskDataModule,
    TaskAccuracy,
    task_accuracy_by_distance,
    task_hits,
)
from zoo.data.text import ByteTextDataModule, ByteTokenizer
from zoo.data.translation import TranslationDataModule

__all__ = [
    "ByteTextDataModule",
    "ImageDataModule",
    "ByteTokenizer",
    "LongRangeTaskDataModule",
    "TaskAccuracy",
    "TranslationDataModule",
    "load_byte_corpus",
    "task_accuracy_by_distance",
    "task_hits",
]
