"""LightningDataModules shared by every family."""

from zoo.data.text import ByteTextDataModule, ByteTokenizer, load_byte_corpus
from zoo.data.translation import TranslationDataModule

__all__ = ["ByteTextDataModule", "ByteTokenizer", "TranslationDataModule", "load_byte_corpus"]
