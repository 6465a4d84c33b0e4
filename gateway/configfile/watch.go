package configfile

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Watcher reloads a config file when it changes and when asked to (SIGHUP).
//
// Lifecycle: fill in the fields; call Load once for the first snapshot;
// call Run in a goroutine; send on Reload to force a reload; cancel Run's
// context to stop it. Load and Run must not run concurrently.
type Watcher struct {
	// Path of the file to watch.
	Path string
	// Apply is called with every successfully parsed new content, and must
	// compile and install it or return why not. A failed Apply or parse is
	// logged and the old snapshot keeps serving; the same content is not
	// retried until the file changes again or a reload is forced.
	Apply func(*configv1.Snapshot) error
	// Interval between checks of the file. Zero means 1 s.
	Interval time.Duration
	// Reload forces a reload, even of unchanged content. May be nil.
	Reload <-chan struct{}
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	last    [sha256.Size]byte
	size    int64
	modTime time.Time
}

// Load reads and parses the file and remembers its content, so Run applies
// only later changes. It does not call Apply.
func (w *Watcher) Load() (*configv1.Snapshot, error) {
	cfg, _, err := w.read(true)
	return cfg, err
}

// Run watches until ctx is done. It polls: a stat every Interval, and a read
// only when size or mtime moved, which works on every file system and for
// editors that replace the file.
func (w *Watcher) Run(ctx context.Context) {
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	interval := w.Interval
	if interval <= 0 {
		interval = time.Second
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-w.Reload:
			force = true
		case <-ticker.C:
		}
		cfg, changed, err := w.read(force)
		if err == nil && changed {
			err = w.Apply(cfg)
		}
		if err != nil {
			log.Error("config rejected; keeping the current snapshot", "path", w.Path, "err", err)
			continue
		}
		if changed {
			log.Info("config reloaded", "path", w.Path, "version", cfg.GetVersion())
		}
	}
}

// read returns the file's snapshot if it changed since the last read (or
// force is set). A content that fails to parse still counts as read, so it
// is reported once, not every interval.
func (w *Watcher) read(force bool) (*configv1.Snapshot, bool, error) {
	fi, err := os.Stat(w.Path)
	if err != nil {
		return nil, false, err
	}
	if !force && fi.Size() == w.size && fi.ModTime().Equal(w.modTime) {
		return nil, false, nil
	}
	w.size, w.modTime = fi.Size(), fi.ModTime()
	data, err := os.ReadFile(w.Path)
	if err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256(data)
	if !force && sum == w.last {
		return nil, false, nil
	}
	w.last = sum
	cfg, err := parseFile(w.Path, data)
	if err != nil {
		return nil, false, err
	}
	return cfg, true, nil
}
