//! Image garbage collection on real containerd: the test bed's image
//! filesystem is a 64 MiB tmpfs; two unused images of random bytes are imported, one
//! pod runs on the busybox image, and a filler file pushes usage over the 85 % high
//! threshold. oxlet's image GC (a short test period, no minimum age) removes the
//! unused images (the order is unit tested in `runtime::image_gc`), keeps the image in use and the pinned
//! sandbox image, and usage drops below the high threshold.

mod agent;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_cri::v1::ListImagesRequest;

const FILLER_A: &str = "localhost/oxlet/filler-a:1";
const FILLER_B: &str = "localhost/oxlet/filler-b:1";
const BUSYBOX: &str = "localhost/oxlet/busybox:1";
const PAUSE: &str = "localhost/oxlet/pause:1";

/// Builds an OCI image-layout archive of one uncompressed layer holding `mib` MiB of
/// random bytes (so the image's size is real), named `reference`, and imports it.
fn import_random_image(bed: &Testbed, reference: &str, mib: u32) {
    let script = r#"set -euo pipefail
ref=$1; mib=$2; sock=$3; arch=$4
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT; cd "$d"
mkdir rootfs blobs blobs/sha256
head -c "$((mib * 1048576))" /dev/urandom > rootfs/filler
tar --sort=name --owner=0 --group=0 --mtime=@0 -C rootfs -cf layer.tar filler
blob() { local h; h=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "blobs/sha256/$h"; echo "$h"; }
ls=$(stat -c%s layer.tar); l=$(blob layer.tar)
printf '{"architecture":"%s","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$arch" "$l" > config.json
cs=$(stat -c%s config.json); c=$(blob config.json)
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$c" "$cs" "$l" "$ls" > manifest.json
ms=$(stat -c%s manifest.json); m=$(blob manifest.json)
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' "$m" "$ms" "$arch" "$ref" "$ref" > index.json
echo '{"imageLayoutVersion":"1.0.0"}' > oci-layout
tar -cf image.tar oci-layout index.json blobs
ctr -a "$sock" -n k8s.io images import image.tar >/dev/null
"#;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let out = Command::new("bash")
        .args(["-c", script, "import"])
        .args([reference, &mib.to_string()])
        .arg(bed.socket())
        .arg(arch)
        .output()
        .expect("running bash");
    assert!(
        out.status.success(),
        "importing {reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The references of the images the CRI lists.
async fn image_refs(bed: &Testbed) -> Vec<String> {
    let mut images = bed.images().await;
    let list = images
        .list_images(ListImagesRequest { filter: None })
        .await
        .expect("ListImages")
        .into_inner()
        .images;
    let mut refs: Vec<String> = list.into_iter().flat_map(|i| i.repo_tags).collect();
    refs.sort();
    refs
}

/// Percent of the filesystem in use, as kubelet computes it from what is available.
fn usage_percent(path: &Path) -> u64 {
    let s = rustix::fs::statvfs(path).expect("statvfs");
    100 - s.f_bavail * 100 / s.f_blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_images_are_removed_when_the_image_fs_is_over_the_high_threshold() {
    let bed = Testbed::start_with_small_image_fs(64).await;
    let root = bed.layout().root.clone();
    import_random_image(&bed, FILLER_A, 4);
    import_random_image(&bed, FILLER_B, 4);
    let refs = image_refs(&bed).await;
    for r in [FILLER_A, FILLER_B, BUSYBOX, PAUSE] {
        assert!(refs.iter().any(|x| x == r), "{r} not imported: {refs:?}");
    }

    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_IMAGE_GC_PERIOD_MS".into(), "300".into()));
    ox.spawn(&["--minimum-image-ttl-duration=0s"]);
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600", "  hostNetwork: true\n"),
    );
    ox.wait_running("web", Duration::from_secs(20)).await;

    // Below the high threshold: several GC periods pass and nothing is removed.
    let before = usage_percent(&root);
    assert!(before < 85, "the bed starts at {before} % already");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(image_refs(&bed).await, refs, "removed below the threshold");

    // Fill to about 88 %: kubelet's amount to free is 20 % of capacity minus what is
    // available, about 5 MiB, so both 4 MiB images must go (the first is not enough).
    let s = rustix::fs::statvfs(&root).unwrap();
    let (capacity, available) = (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize);
    let filler = available - capacity * 12 / 100;
    std::fs::write(root.join("filler"), vec![0x5a_u8; filler as usize]).unwrap();
    // The filler takes the fs to 88 % of what statvfs said; read back, the GC (every
    // 300 ms) may already have freed the images on a loaded machine, which only a fill
    // past the threshold makes it do.
    let full = usage_percent(&root);
    let gone = |refs: &[String]| !refs.iter().any(|r| r == FILLER_A || r == FILLER_B);
    assert!(
        full >= 85 || gone(&image_refs(&bed).await),
        "filled to only {full} %"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let left = loop {
        let now = image_refs(&bed).await;
        if gone(&now) {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the unused images are still there: {now:?}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        left.iter().any(|r| r == BUSYBOX),
        "the image in use was removed: {left:?}"
    );
    assert!(
        left.iter().any(|r| r == PAUSE),
        "the pinned sandbox image was removed: {left:?}"
    );
    let after = usage_percent(&root);
    eprintln!("image fs usage: {before} % at start, {full} % filled, {after} % after the GC");
    assert!(after < 85, "usage still {after} % (was {full} %)");
    let log = ox.log();
    assert_eq!(
        log.matches("removing image to free bytes").count(),
        2,
        "{}",
        tail(&log, 40)
    );
    // Still running: the pod's image was never taken from it.
    ox.wait_running("web", Duration::from_secs(5)).await;
}
