package redissync

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLogEvery is how often go-redis's own lines may reach the log: as
// often as a failed sync (errLogEvery).
var redisLogEvery = errLogEvery

// redisLogOnce makes the first Syncer's logger go-redis's logger. go-redis
// keeps one logger for the whole process (redis.SetLogger); by default it
// prints every line to stderr, unstructured and unlimited: a dial that
// fails is a line per pooled connection tried, some 30 per node in 30 s of
// Redis outage.
var redisLogOnce sync.Once

// setRedisLogger routes go-redis's lines through log (slog.Default() at
// the time of each line if nil), once per process.
func setRedisLogger(log *slog.Logger) {
	redisLogOnce.Do(func() { redis.SetLogger(&redisLog{log: log}) })
}

// redisLog is go-redis's logger: it logs a warning for a line at most
// every redisLogEvery, with the count of the lines it left out since the
// previous warning. Its Printf may be called concurrently, from go-redis's
// connection pool and the callers of a client.
type redisLog struct {
	log *slog.Logger

	mu         sync.Mutex
	last       time.Time // of the last warning
	suppressed int       // lines since then
}

// Printf logs go-redis's line, or counts it.
func (l *redisLog) Printf(ctx context.Context, format string, v ...any) {
	now := time.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < redisLogEvery {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	log := l.log
	if log == nil {
		log = slog.Default()
	}
	// go-redis starts many of its lines with its own "redis: ".
	line := strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: ")
	log.WarnContext(ctx, "redis client problem", "line", line, "suppressed", suppressed)
}
