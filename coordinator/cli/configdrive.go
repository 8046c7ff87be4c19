package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bmedge/bmedge/coordinator/configdrive"
)

const configDriveUsage = "config drive for the instance (cloud-init's config-2), as Ironic's clients take it: a `JSON` object with meta_data, user_data, network_data, vendor_data (built by the coordinator); a DIRECTORY of config-drive files (openstack/latest/meta_data.json …), built into an ISO 9660 image here; a FILE holding such a JSON object, an ISO image, or a gzipped base64-encoded image; or an http(s) URL of an image, fetched through the site's image cache"

// maxConfigDriveDir bounds what is read from a config-drive directory
// (the coordinator's own limit for a built image).
const maxConfigDriveDir = configdrive.MaxImageBytes

// configDriveValue turns --config-drive's value into the API's
// configdrive: a JSON object, or a string (gzipped base64 image, URL).
func configDriveValue(v string) (any, error) {
	t := strings.TrimSpace(v)
	switch {
	case t == "":
		return nil, usagef("--config-drive is empty; give a JSON object, a directory, a file or an http(s) URL")
	case strings.HasPrefix(t, "{"):
		var obj map[string]any
		if err := json.Unmarshal([]byte(t), &obj); err != nil {
			return nil, usagef("--config-drive looks like JSON but is not a valid object: %v", err)
		}
		return obj, nil
	case strings.HasPrefix(t, "http://") || strings.HasPrefix(t, "https://"):
		return t, nil
	}
	st, err := os.Stat(v)
	if err != nil {
		return nil, usagef("--config-drive %q is neither a JSON object, an http(s) URL, nor a file or directory that can be read: %v", v, err)
	}
	if st.IsDir() {
		return configDriveFromDir(v)
	}
	if st.Size() > maxConfigDriveDir {
		return nil, usagef("--config-drive file %s is %d bytes, more than the %d MiB a config drive may be", v, st.Size(), maxConfigDriveDir>>20)
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("cannot read --config-drive file: %v", err)
	}
	if t := bytes.TrimSpace(b); bytes.HasPrefix(t, []byte("{")) {
		var obj map[string]any
		if err := json.Unmarshal(t, &obj); err != nil {
			return nil, usagef("--config-drive file %s looks like JSON but is not a valid object: %v", v, err)
		}
		return obj, nil
	}
	if _, err := configdrive.Decode(string(bytes.TrimSpace(b))); err == nil {
		return string(bytes.TrimSpace(b)), nil // already gzipped and base64-encoded
	}
	// An image (ISO 9660 or VFAT): sent gzipped and base64-encoded.
	return configdrive.Encode(b)
}

// configDriveFromDir builds a config-2 ISO 9660 image of a directory's
// files, as python-ironicclient's make_configdrive does.
func configDriveFromDir(dir string) (string, error) {
	files := map[string][]byte{}
	total := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if total += len(b); total > maxConfigDriveDir {
			return fmt.Errorf("the files of %s are more than the %d MiB a config drive may be", dir, maxConfigDriveDir>>20)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return "", usagef("--config-drive directory %s: %v", dir, err)
	}
	if len(files) == 0 {
		return "", usagef("--config-drive directory %s holds no files; it should hold openstack/latest/meta_data.json and the like", dir)
	}
	img, err := configdrive.BuildISO(configdrive.Label, files)
	if err != nil {
		return "", fmt.Errorf("cannot build a config drive of %s: %v", dir, err)
	}
	return configdrive.Encode(img)
}
