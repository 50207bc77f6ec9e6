package options

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver"
)

// Storage backends.
const (
	// BackendEmbedded keeps Runs in a local file; one replica.
	BackendEmbedded = "embedded"
	// BackendEtcd3 keeps Runs in etcd; several replicas may share it.
	BackendEtcd3 = "etcd3"
)

// StorageOptions choose where Runs and Runtimes are stored. The backend is
// the etcd options' own --storage-backend flag, which gains "embedded" as
// its default.
type StorageOptions struct {
	Etcd *genericoptions.EtcdOptions
	Path string
}

// NewStorageOptions defaults to the embedded backend in ./kruntimes-data.
func NewStorageOptions(etcd *genericoptions.EtcdOptions) *StorageOptions {
	etcd.StorageConfig.Type = BackendEmbedded
	return &StorageOptions{Etcd: etcd, Path: "kruntimes-data"}
}

// Backend is the chosen backend.
func (o *StorageOptions) Backend() string { return o.Etcd.StorageConfig.Type }

// AddFlags registers --storage-path and rewords the etcd options'
// --storage-backend, which must already be registered on fs.
func (o *StorageOptions) AddFlags(fs *pflag.FlagSet) {
	if f := fs.Lookup("storage-backend"); f != nil {
		f.Usage = fmt.Sprintf("Where to store Runs and Runtimes: %q (a durable local file under --storage-path; a single replica) or %q (the etcd cluster of --etcd-servers; several replicas).", BackendEmbedded, BackendEtcd3)
		f.DefValue = BackendEmbedded
	}
	fs.StringVar(&o.Path, "storage-path", o.Path,
		"Directory of the embedded backend's data file. Only one server may use a directory at a time.")
}

// Validate checks the storage flags.
func (o *StorageOptions) Validate() []error {
	// The etcd options check --storage-media-type only when etcd is the
	// backend; it applies to both.
	if _, _, err := storageCodec(o.Etcd.DefaultStorageMediaType); err != nil {
		return []error{fmt.Errorf("--storage-media-type: %w", err)}
	}
	switch o.Backend() {
	case BackendEmbedded:
		if o.Path == "" {
			return []error{fmt.Errorf("--storage-path is required with --storage-backend=%s", BackendEmbedded)}
		}
	case BackendEtcd3:
	default:
		return []error{fmt.Errorf("--storage-backend=%q is not supported: use %q or %q", o.Backend(), BackendEmbedded, BackendEtcd3)}
	}
	return nil
}

// storageCodec writes objects to storage as v1alpha1 in mediaType
// (--storage-media-type) and reads them back into the internal version from
// any encoding the apiserver speaks (JSON, YAML, protobuf, CBOR), so data
// written with another --storage-media-type stays readable and is rewritten
// in mediaType on its next update.
func storageCodec(mediaType string) (runtime.Codec, runtime.GroupVersioner, error) {
	return serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType:  mediaType,
		StorageSerializer: apiserver.Codecs,
		StorageVersion:    v1alpha1.SchemeGroupVersion,
		MemoryVersion:     schema.GroupVersion{Group: v1alpha1.GroupName, Version: runtime.APIVersionInternal},
	})
}
