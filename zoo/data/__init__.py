"""LightningDataModules shared by every family."""

from zoo.data.text import ByteTextDataModule, ByteTokenizer, load_byte_corpus

__all__ = ["ByteTextDataModule", "ByteTokenizer", "load_byte_corpus"]
