package runlog

import (
	"kruntimes.io/kruntimes/apis/kruntimes"
)

// ChunkOverhead is what a chunk counts besides its bytes: its stream, its
// time and its framing in a stored record.
const ChunkOverhead = 32

// Size is what log counts against its namespace's limit and a record's
// bound: its bytes, and ChunkOverhead per chunk.
func Size(log *kruntimes.RunLog) int64 {
	var n int64
	for _, c := range log.Chunks {
		n += int64(len(c.Data)) + ChunkOverhead
	}
	return n
}

// shrink returns log cut to at most limit bytes as Size counts them, the
// way the Runtime Server bounds a log: its first bytes and its last bytes
// are kept, half of limit each (what one side does not need goes to the
// other), and the bytes between are counted in DroppedBytes, which the
// marker line renders. A log within limit is returned as it is; log is
// never changed.
func shrink(log *kruntimes.RunLog, limit int64, by string) *kruntimes.RunLog {
	if Size(log) <= limit {
		return log
	}
	limit = max(limit, 0)
	head, tail := log.Chunks[:log.DroppedAfter], log.Chunks[log.DroppedAfter:]
	if log.DroppedBytes == 0 {
		// One run of bytes: the head is its first half, the tail the
		// rest, which the tail's bound cuts.
		head = keepFirst(log.Chunks, limit/2)
		tail = log.Chunks[len(head):]
		if n := len(head); n > 0 && len(head[n-1].Data) < len(log.Chunks[n-1].Data) {
			rest := log.Chunks[n-1]
			rest.Data = rest.Data[len(head[n-1].Data):]
			tail = append([]kruntimes.RunLogChunk{rest}, tail...)
		}
	}
	headSize, tailSize := Size(&kruntimes.RunLog{Chunks: head}), Size(&kruntimes.RunLog{Chunks: tail})
	headLimit := limit / 2
	switch {
	case headSize <= headLimit:
		headLimit = headSize
	case tailSize <= limit-headLimit:
		headLimit = limit - tailSize
	}
	keptHead := keepFirst(head, headLimit)
	keptTail := keepLast(tail, limit-Size(&kruntimes.RunLog{Chunks: keptHead}))
	out := log.DeepCopy()
	out.Chunks = append(keptHead, keptTail...)
	out.DroppedAfter = int32(len(keptHead))
	out.DroppedBytes = log.DroppedBytes + dataBytes(log.Chunks) - dataBytes(out.Chunks)
	out.DroppedBy = by
	return out
}

// keepFirst is the first chunks of chunks within limit, the last of them
// cut to its first bytes.
func keepFirst(chunks []kruntimes.RunLogChunk, limit int64) []kruntimes.RunLogChunk {
	var kept []kruntimes.RunLogChunk
	for _, c := range chunks {
		room := limit - ChunkOverhead
		if room <= 0 {
			break
		}
		if int64(len(c.Data)) > room {
			c.Data = c.Data[:room]
		}
		kept = append(kept, c)
		limit -= int64(len(c.Data)) + ChunkOverhead
	}
	return kept
}

// keepLast is the last chunks of chunks within limit, the first of them
// cut to its last bytes.
func keepLast(chunks []kruntimes.RunLogChunk, limit int64) []kruntimes.RunLogChunk {
	first := len(chunks)
	var cut []byte
	for i := len(chunks) - 1; i >= 0; i-- {
		room := limit - ChunkOverhead
		if room <= 0 {
			break
		}
		data := chunks[i].Data
		first = i
		if int64(len(data)) > room {
			cut = data[int64(len(data))-room:]
			break
		}
		limit -= int64(len(data)) + ChunkOverhead
	}
	kept := append([]kruntimes.RunLogChunk(nil), chunks[first:]...)
	if cut != nil {
		kept[0].Data = cut
	}
	return kept
}

func dataBytes(chunks []kruntimes.RunLogChunk) int64 {
	var n int64
	for _, c := range chunks {
		n += int64(len(c.Data))
	}
	return n
}
