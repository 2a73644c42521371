/** What every object and chunk of one answer repeats: its id, when it was created, the model. */
export interface AnswerHeader {
  id: string;
  /** Unix seconds. */
  created: number;
  model: string;
}

export function answerHeader(id: string, model: string): AnswerHeader {
  return { id, created: Math.floor(Date.now() / 1000), model };
}
