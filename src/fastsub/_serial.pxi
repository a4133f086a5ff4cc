# Serialization glue (placeholder until csrc/fs_serial.c lands; being written).
def _sublist_to_bytes(Sublist sl):
    raise NotImplementedError("to_bytes is being written")


def _sublist_from_bytes(data, cache_size=0):
    raise NotImplementedError("from_bytes is being written")
