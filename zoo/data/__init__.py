"""LightningDataModules shared by every family."""

from zoo.data.images import ImageDataModule
from zoo.data.text import ByteTextDataModule, ByteTokenizer, load_byte_corpus
from zoo.data.translation import TranslationDataModule

__all__ = [
    "ByteTextDataModule",
    "ImageDataModule",
    "ByteTokenizer",
    "TranslationDataModule",
    "load_byte_corpus",
]
