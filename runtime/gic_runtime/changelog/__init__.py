"""The durable short-term log (DSTL): change records, segment format, writer, uploader."""
