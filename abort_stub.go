package etcdlock

import (
	"context"
	"errors"
	"fmt"
)

// STUB: replaced by the real AbortMove.
//
// AbortMove gives up the move of slot in progress. This stub only says it
// is not built; it changes nothing.
func (r *Shards) AbortMove(ctx context.Context, slot int) error {
	return newError("abort move", "", fmt.Errorf("slot %d: %w (stub)", slot, errors.ErrUnsupported))
}
