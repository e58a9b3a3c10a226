package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fsnotify/fsnotify"
)

// errConfigChanged ends a proxy whose --config file was written or
// renamed: as kube-proxy 1.37, it exits with an error so that whoever
// runs it (kubelet) starts it again with the new file.
var errConfigChanged = errors.New("content of the proxy server's configuration file was updated")

// configWatcher watches kube-proxy's configuration file, as kube-proxy
// does (fsnotify on the file): a write or a rename of it is a change;
// other events (chmod, remove, create) are not.
type configWatcher struct {
	path string
	w    *fsnotify.Watcher
}

// watchConfig starts watching path; the events that arrive before run are
// kept for it.
func watchConfig(path string) (*configWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching --config: %w", err)
	}
	if err := w.Add(path); err != nil {
		w.Close()
		return nil, fmt.Errorf("watching --config %s: %w", path, err)
	}
	return &configWatcher{path: path, w: w}, nil
}

// run waits until the file changes, the watch fails or ctx is done, then
// stops watching; it logs the change, and calls stop with errConfigChanged
// or the watch's error (not when ctx is done).
func (c *configWatcher) run(ctx context.Context, log *slog.Logger, stop context.CancelCauseFunc) {
	defer c.w.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-c.w.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Rename) {
				log.Error("exiting: kube-proxy's configuration file changed; restart to apply it", "file", c.path, "event", ev.Op.String())
				stop(errConfigChanged)
				return
			}
		case err, ok := <-c.w.Errors:
			if !ok {
				return
			}
			log.Error("exiting: watching kube-proxy's configuration file failed", "file", c.path, "err", err)
			stop(fmt.Errorf("watching --config %s: %w", c.path, err))
			return
		}
	}
}
