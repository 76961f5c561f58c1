/* image_input.h - the images of a chat request made ready for the engine, on
 * the HTTP thread (the engine thread only encodes): each URL fetched
 * (media_fetch.h), decoded within the pixel budget (--max-image-pixels), its
 * token count taken from the tower's smart resize; for a run, also
 * preprocessed into patches and hashed for the prefix cache. The rendered
 * prompt's <|image_pad|> tokens (one per image, as the chat template writes
 * them) are then expanded to one per image token. Every failure is a 400
 * naming the part (messages[1].content[2].image_url) and saying why. */
#ifndef DS_IMAGE_INPUT_H
#define DS_IMAGE_INPUT_H

#include "engine/engine.h"
#include "server/completion.h"

typedef struct ds_prompt_images {
    ds_request_image *items;   /* in prompt order */
    int n;
} ds_prompt_images;

/* Checks that the request may carry its images (a tower is loaded, no more
 * than --limit-mm-per-prompt): before anything is fetched or rendered. */
int ds_image_input_check(ds_server *s, const ds_oai_request *r, ds_http_error *err);
/* Expands toks in place. out NULL: only the token counts (tokenize); else out
 * gets each image's hash and first token, and with patches 1 its patches too
 * (a run; render needs only where each image is and which it is). A prompt
 * without images is left as it is unless it holds image pads anyway (a 400). */
int ds_image_input_expand(ds_server *s, const ds_oai_request *r, ds_tokens *toks, ds_prompt_images *out, int patches,
                          ds_http_error *err);
/* A deep copy (each choice of a request hands its own patches to the engine). */
int ds_prompt_images_copy(const ds_prompt_images *from, ds_prompt_images *to);
/* Frees the patches that are still held, and the list. */
void ds_prompt_images_free(ds_prompt_images *p);

#endif
