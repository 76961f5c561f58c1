"""make_images.py - writes the small images tests/unit/test_image.c decodes,
each with NAME.rgb beside it: the pixels PIL gives for it (after
ImageOps.exif_transpose and the Hugging Face processor's convert_to_rgb), as
width and height (uint32 little-endian) then RGB bytes.

Run with Debian's python3 (python3-pil) from this folder; the outputs are
committed, so the C test needs no Python.
"""

import io
import struct

from PIL import Image, ImageOps


def convert_to_rgb(im):
    """transformers.image_transforms.convert_to_rgb"""
    if im.mode == "RGB":
        return im
    rgba = im.convert("RGBA")
    bg = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(bg, rgba).convert("RGB")


def expected(name):
    with Image.open(name) as im:
        im = ImageOps.exif_transpose(im)
        im = convert_to_rgb(im)
        with open(name.rsplit(".", 1)[0] + "_" + name.rsplit(".", 1)[1] + ".rgb", "wb") as f:
            f.write(struct.pack("<II", im.width, im.height) + im.tobytes())


def pattern(w, h):
    im = Image.new("RGB", (w, h))
    im.putdata([(x * 30 % 256, y * 50 % 256, (x + y) * 10 % 256) for y in range(h) for x in range(w)])
    return im


def quadrants(w, h):
    """four flat blocks (red, green, blue, yellow), so JPEG keeps them and an orientation shows"""
    im = Image.new("RGB", (w, h))
    cols = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (230, 220, 40)]
    im.putdata([cols[(y >= h // 2) * 2 + (x >= w // 2)] for y in range(h) for x in range(w)])
    return im


def main():
    names = []
    p = pattern(7, 5)
    p.save("pattern.png")
    p.save("pattern.webp", lossless=True)
    q = p.copy()
    q.putpixel((3, 2), (1, 2, 3))
    q.save("pattern_changed.png")
    pal = Image.new("P", (7, 5))
    pal.putpalette([c for px in p.getdata() for c in px])
    pal.putdata(list(range(35)))
    pal.save("pattern.gif")
    names += ["pattern.png", "pattern.webp", "pattern_changed.png", "pattern.gif"]

    t = pal.copy()
    t.info["transparency"] = 3
    t.save("transparent.gif", transparency=3)
    names.append("transparent.gif")

    a = Image.new("RGBA", (4, 2))
    a.putdata([(200, 100, 0, v) for v in (0, 1, 64, 128)] + [(10, 250, 90, v) for v in (200, 254, 255, 30)])
    a.save("alpha.png")
    a.save("alpha.webp", lossless=True)
    names += ["alpha.png", "alpha.webp"]

    g = p.convert("L")
    g.save("gray.png")
    la = Image.merge("LA", (g, g.point(lambda v: 255 - v)))
    la.save("gray_alpha.png")
    p.quantize(16).save("palette.png")
    names += ["gray.png", "gray_alpha.png", "palette.png"]

    base = quadrants(16, 8)
    base.save("quadrants.jpg", quality=95)
    base.save("quadrants_progressive.jpg", quality=95, progressive=True)
    base.convert("L").save("gray.jpg", quality=95)
    base.save("quadrants_lossy.webp", quality=90)
    names += ["quadrants.jpg", "quadrants_progressive.jpg", "gray.jpg", "quadrants_lossy.webp"]
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        name = f"orient{o}.jpg"
        base.save(name, quality=95, exif=exif.tobytes())
        names.append(name)
    for n in names:
        expected(n)


if __name__ == "__main__":
    main()
