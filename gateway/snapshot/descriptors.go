package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	// The extensions a service's descriptors may use, which decoding must
	// know to keep them as fields rather than unknown bytes.
	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	_ "google.golang.org/genproto/googleapis/api/annotations"
	_ "google.golang.org/genproto/googleapis/api/httpbody"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// loadFiles resolves a service's descriptors into a registry of its files.
// Imports that the descriptors leave out are taken from the files linked
// into the gateway (google/protobuf/*, google/api/*,
// buf/validate/validate.proto). Every problem is returned, each naming its
// file.
func loadFiles(d *configv1.Descriptors) (*protoregistry.Files, []string) {
	var set *descriptorpb.FileDescriptorSet
	switch src := d.GetSource().(type) {
	case *configv1.Descriptors_FileDescriptorSet:
		set = &descriptorpb.FileDescriptorSet{}
		if err := proto.Unmarshal(src.FileDescriptorSet, set); err != nil {
			return nil, []string{"file_descriptor_set does not decode as a google.protobuf.FileDescriptorSet: " + err.Error()}
		}
	case *configv1.Descriptors_Sources:
		var problems []string
		set, problems = compileSources(src.Sources)
		if len(problems) > 0 {
			return nil, problems
		}
	default:
		return nil, []string{"no descriptors"}
	}
	return buildFiles(set)
}

// buildFiles links the files of set, each after the files it imports.
func buildFiles(set *descriptorpb.FileDescriptorSet) (*protoregistry.Files, []string) {
	byName := make(map[string]*descriptorpb.FileDescriptorProto, len(set.GetFile()))
	var problems []string
	for _, f := range set.GetFile() {
		if _, dup := byName[f.GetName()]; dup {
			problems = append(problems, fmt.Sprintf("%s: the file is in the set twice", f.GetName()))
			continue
		}
		byName[f.GetName()] = f
	}
	files := &protoregistry.Files{}
	res := &linkedResolver{local: files}
	state := map[string]int{} // 1 linking, 2 done (or failed)
	var link func(name string, from string) bool
	link = func(name, from string) bool {
		switch state[name] {
		case 1:
			problems = append(problems, fmt.Sprintf("%s: import cycle through %s", from, name))
			return false
		case 2:
			_, err := files.FindFileByPath(name)
			return err == nil
		}
		f, ok := byName[name]
		if !ok {
			if _, err := protoregistry.GlobalFiles.FindFileByPath(name); err == nil {
				return true
			}
			problems = append(problems, fmt.Sprintf("%s: imports %s, which is neither in the set nor one the gateway has", from, name))
			return false
		}
		state[name] = 1
		ok = true
		for _, dep := range f.GetDependency() {
			if !link(dep, name) {
				ok = false
			}
		}
		state[name] = 2
		if !ok {
			return false
		}
		fd, err := protodesc.NewFile(f, res)
		if err == nil {
			err = files.RegisterFile(fd)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			return false
		}
		return true
	}
	for _, f := range set.GetFile() {
		link(f.GetName(), f.GetName())
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return files, nil
}

// linkedResolver finds the files of a set being linked, then the gateway's
// own.
type linkedResolver struct{ local *protoregistry.Files }

func (r *linkedResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.local.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r *linkedResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.local.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}

// compileSources compiles .proto sources into a FileDescriptorSet of them
// (imports of the gateway's own files excluded), or lists every error.
func compileSources(src *configv1.ProtoSources) (*descriptorpb.FileDescriptorSet, []string) {
	contents := make(map[string]string, len(src.GetFiles()))
	names := make([]string, 0, len(src.GetFiles()))
	var problems []string
	for _, f := range src.GetFiles() {
		if _, dup := contents[f.GetName()]; dup {
			problems = append(problems, fmt.Sprintf("%s: the file is given twice", f.GetName()))
			continue
		}
		contents[f.GetName()] = f.GetContent()
		names = append(names, f.GetName())
	}
	if len(problems) > 0 {
		return nil, problems
	}
	c := protocompile.Compiler{
		Resolver: protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
			if s, ok := contents[path]; ok {
				return protocompile.SearchResult{Source: strings.NewReader(s)}, nil
			}
			// The gateway's own files: well-known types, google/api,
			// buf/validate. Never the network, never the disk.
			if fd, err := protoregistry.GlobalFiles.FindFileByPath(path); err == nil {
				return protocompile.SearchResult{Desc: fd}, nil
			}
			return protocompile.SearchResult{}, errors.New("neither in the sources nor one the gateway has")
		}),
		Reporter: reporter.NewReporter(func(err reporter.ErrorWithPos) error {
			problems = append(problems, err.Error())
			return nil // keep going: report every error
		}, nil),
		SourceInfoMode: protocompile.SourceInfoNone,
	}
	linked, err := c.Compile(context.Background(), names...)
	if len(problems) > 0 {
		return nil, problems
	}
	if err != nil {
		if !errors.Is(err, reporter.ErrInvalidSource) {
			problems = append(problems, err.Error())
		}
		return nil, problems
	}
	// Every source file and the source files they import, each once, in
	// the order the compiler linked them.
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if _, ours := contents[fd.Path()]; seen[fd.Path()] || !ours {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range linked {
		add(fd)
	}
	// Re-encoding through the wire format turns the options protocompile
	// interpreted into the extension fields the gateway reads.
	b, err := proto.Marshal(set)
	if err == nil {
		set = &descriptorpb.FileDescriptorSet{}
		err = proto.Unmarshal(b, set)
	}
	if err != nil {
		return nil, []string{"re-encoding the compiled files: " + err.Error()}
	}
	return set, nil
}
