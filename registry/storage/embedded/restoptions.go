package embedded

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// RESTOptionsGetter returns the getter generic registry stores use to build
// their storage on this backend. config supplies the codec, the key prefix
// and the transformer (see storagebackend.NewDefaultConfig); its etcd fields
// are ignored.
func (b *Backend) RESTOptionsGetter(config storagebackend.Config) generic.RESTOptionsGetter {
	return &restOptionsGetter{backend: b, config: config}
}

type restOptionsGetter struct {
	backend *Backend
	config  storagebackend.Config
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (g *restOptionsGetter) GetRESTOptions(gr schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{
		StorageConfig:           g.config.ForResource(gr),
		Decorator:               g.backend.StorageDecorator(),
		EnableGarbageCollection: true,
		DeleteCollectionWorkers: 1,
		ResourcePrefix:          gr.Group + "/" + gr.Resource,
		CountMetricPollPeriod:   time.Minute,
	}, nil
}

// UncachedStorageDecorator implements what registry/runlog asks of a
// RESTOptionsGetter for a resource that is never listed or watched: this
// backend's store without a watch cache.
func (g *restOptionsGetter) UncachedStorageDecorator() generic.StorageDecorator {
	return g.backend.storageDecorator(false)
}

// StorageDecorator returns a generic.StorageDecorator building this
// backend's store for a resource, wrapped in the apiserver's watch cache
// unless Options.DisableWatchCache is set.
func (b *Backend) StorageDecorator() generic.StorageDecorator {
	return b.storageDecorator(!b.opts.DisableWatchCache)
}

func (b *Backend) storageDecorator(watchCache bool) generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string,
		keyFunc func(runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
		getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		s, err := b.newStore(StoreConfig{
			Codec:          config.Codec,
			Transformer:    config.Transformer,
			Prefix:         config.Prefix,
			ResourcePrefix: resourcePrefix,
			GroupResource:  config.GroupResource,
			NewFunc:        newFunc,
			NewListFunc:    newListFunc,
		})
		if err != nil {
			return nil, func() {}, err
		}
		var bare storage.Interface = s
		if utilfeature.DefaultFeatureGate.Enabled(features.AllowUnsafeMalformedObjectDeletion) {
			s.interpretCorrupt = true
			s.setTransformer(s.transformer.Load().raw)
			bare = newCorruptObjectDeleter(s, config.GroupResource)
		}
		if !watchCache {
			// The store holds no resources of its own: the Backend's owner
			// closes the file.
			return bare, func() {}, nil
		}
		declareProgressSupport()
		window := config.EventsHistoryWindow
		if window < storagebackend.DefaultEventsHistoryWindow {
			window = storagebackend.DefaultEventsHistoryWindow
		}
		c, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
			Storage:             bare,
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: window,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             keyFunc,
			NewFunc:             newFunc,
			NewListFunc:         newListFunc,
			GetAttrsFunc:        getAttrs,
			IndexerFuncs:        trigger,
			Indexers:            indexers,
			Codec:               config.Codec,
		})
		if err != nil {
			return nil, func() {}, err
		}
		klog.Background().V(2).Info("Watch cache enabled over embedded storage", "resource", config.GroupResource)
		d := cacherstorage.NewCacheDelegator(c, bare)
		var once sync.Once
		return &cachedStore{Interface: d, store: s}, func() {
			once.Do(func() {
				d.Stop()
				c.Stop()
			})
		}, nil
	}
}

// HealthChecker returns a healthz/readyz check named "embedded-storage"
// that fails once the data file is closed or unreadable.
func (b *Backend) HealthChecker() healthz.HealthChecker {
	return healthz.NamedCheck("embedded-storage", func(*http.Request) error { return b.Check() })
}
